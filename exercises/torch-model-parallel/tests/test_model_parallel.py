"""Hidden tests for split_model and train. They run in the judge; the learner's code runs in the subject with two
virtual CUDA devices (see probes.py). Probes report what happened; the expectations are computed here, on the
CPU, from the same seeded model trained on one device, and each message names a cause only where a probe saw it.
"""

import pytest
import torch
from probes import SPLIT, build_model, data
from runner import feedback

ROWS, STEPS, LR = 16, 8, 0.1
TRAIN_ROWS = len(data()[1])
LAYERS = len(build_model())
DP_TYPES = ("torch.nn.parallel.data_parallel.DataParallel", "torch.nn.parallel.distributed.DistributedDataParallel")
MIXED = "Expected all tensors to be on the same device"
TRAIN_CALL = f"train(pipe, x, y, steps={STEPS}, lr={LR})"
FORWARD_CALL = "pipe(x) for a batch x on cuda:0"


def _probe(probe, name, **kwargs):
    try:
        return probe(name, **kwargs)
    except Exception as exc:  # the learner's exception (every probe calls split_model first), turned into feedback
        type_name = getattr(exc, "type_name", type(exc).__name__)
        got = feedback.raised("split_model(model)", type_name, str(exc.args[0]) if exc.args else "")
        line = getattr(exc, "line", None)
        feedback.fail(got.message + (f" (your code, line {line})" if line else ""), details=got.details)


def _want(layer: int) -> str:
    return "cuda:0" if layer < SPLIT else "cuda:1"


def _layer_of(name: str) -> int:
    return int(name.split(".", 1)[0])


def _layers(names) -> str:
    """'model[0] and model[2]' for parameter names (or layer numbers)."""
    found = sorted({n if isinstance(n, int) else _layer_of(n) for n in names})
    said = [f"model[{i}]" for i in found]
    return said[0] if len(said) == 1 else ", ".join(said[:-1]) + f" and {said[-1]}"


def _is_dp(seen) -> bool:
    return any(t in DP_TYPES for t in seen.get("module_types", []))


def _undone_split(moves, device: str) -> bool:
    """Whether, with every parameter now on ``device``, a module had been moved to the other GPU before: a later
    move of a module that held that stage sent it to ``device``."""
    return any(what.startswith("module") and dst.startswith("cuda") and dst != device for what, _, dst in moves)


def _join_hint(shape, rows: int, chunks: int) -> str:
    """What a wrong output shape says about how micro-batch outputs were joined ('' when it says nothing)."""
    if chunks > 1 and shape and len(shape) == 2 and shape[1] == 4 * chunks and shape[0] * chunks == rows:
        return (
            f" Your forward ran the last layer {chunks} times, once per micro-batch, and the {chunks} outputs of "
            f"shape [{shape[0]}, 4] came back side by side, [{shape[0]}, {shape[1]}]: they were joined along dim 1, "
            "the class dimension. Join them along the batch dimension, torch.cat(outputs, dim=0), so that the rows "
            "come back as one batch, in order."
        )
    if chunks > 1:
        return (
            f" Your forward ran the last layer {chunks} times, once per micro-batch: join the micro-batches' outputs "
            "along the batch dimension, torch.cat(outputs, dim=0), so that the rows come back as one batch, in order."
        )
    return ""


def _reference_output(rows=ROWS, seed=0):
    x, _ = data(rows)
    with torch.no_grad():
        return build_model(seed)(x)


def _reference_training(steps=STEPS, lr=LR, seed=0):
    model = build_model(seed)
    x, y = data()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, {n: p.detach() for n, p in model.named_parameters()}


def _forward_failure(seen) -> feedback.Explained:
    """Explain why the forward pass raised, from where the failing layer's input and weights were."""
    err = seen["error"]
    got = feedback.raised(FORWARD_CALL, err["type"], err["message"])
    calls = seen["calls"]
    if MIXED not in err["message"] or not calls or calls[-1][0] != "in":
        return got  # it did not fail inside one of the model's layers
    _, layer, device, _ = calls[-1]
    weights = seen["model_param_devices"].get(f"{layer}.weight")
    if weights is None or weights == device:
        return got
    stage = "first" if layer < SPLIT else "second"
    said = (
        f"{FORWARD_CALL} failed in model[{layer}], a layer of the {stage} stage: its weights are on {weights} and "
        f"its input came on {device}, and a layer computes only on tensors on its own device."
    )
    undone = _undone_split(seen.get("split_moves", []), weights) and set(seen["model_param_devices"].values()) == {
        weights
    }
    if layer >= SPLIT and device == "cuda:0" and weights == "cuda:1":
        said += (
            " The activation from the first stage reached it still on cuda:0: nothing moves the activation for you. "
            "In forward, move the activation to cuda:1 between the stages: self.second(h.to('cuda:1'))."
        )
    elif layer >= SPLIT and device == "cuda:1" and weights == "cuda:0":
        said += " Your forward moved the activation to cuda:1, but the second stage's weights are on cuda:0: " + (
            "your code had moved a stage to cuda:1, and a later .cuda() / .to('cuda') on a module that holds "
            "both stages moved every parameter to cuda:0, which undoes the split."
            if undone
            else "put model[4:] on cuda:1 (a .cuda() or .to('cuda') on a module that contains both stages "
            "moves every parameter to one device and undoes the split)."
        )
    elif layer < SPLIT and weights == "cuda:1":
        said += " The first stage belongs on cuda:0, " + (
            "and your code had moved a stage there, but a later move put every parameter on cuda:1: a "
            ".to('cuda:1') (or .cuda(1)) on a module that holds both stages moves every parameter of every "
            "submodule to that one device, which undoes the split. Move each stage on its own and do not move "
            "the whole module afterwards."
            if undone
            else f"where the batch comes: put model[:{SPLIT}] on cuda:0."
        )
    return feedback.Explained(said, got.details, got.cause)


def test_each_half_on_its_device(probe):
    seen = _probe(probe, "placement")
    if not seen["is_module"]:
        pytest.fail(f"split_model returned a {seen['type']}; expected an nn.Module that runs both stages.")
    devices = seen["model_param_devices"]
    wrong = {n: d for n, d in devices.items() if d != _want(_layer_of(n))}
    if not wrong:
        return
    where = ", ".join(f"{n} on {d}" for n, d in list(wrong.items())[:4])
    intro = (
        f"model[:{SPLIT}] (layers 0-3) must be on cuda:0 and model[{SPLIT}:] (layers 4-6) on cuda:1, but found {where}"
    )
    found = set(devices.values())
    if found == {"cpu"} and seen.get("foreign_params"):
        pytest.fail(
            f"{intro}: the layers you were given stayed on the CPU, while the module split_model returned holds "
            f"{seen['foreign_params']} parameters that are not theirs (copies, from copy.deepcopy say, or new "
            f"layers). Place and use the given layers themselves: model[:{SPLIT}].to('cuda:0') moves those very "
            "layers, in place."
        )
    if found == {"cpu"}:
        pytest.fail(
            f"{intro}: none of the given layers was moved. Move model[:{SPLIT}] to cuda:0 and model[{SPLIT}:] to "
            "cuda:1."
        )
    if _is_dp(seen):
        pytest.fail(
            f"{intro}. You wrapped the model in DataParallel, which keeps the whole model on cuda:0 and copies it "
            "to every GPU for each batch (replicas, not a split): every GPU must still hold the whole model. "
            "Model parallelism places each half on its own GPU, once."
        )
    if len(found) == 1 and found <= {"cuda:0", "cuda:1"}:
        (device,) = found
        other = "cuda:1" if device == "cuda:0" else "cuda:0"
        if _undone_split(seen["moves"], device):
            pytest.fail(
                f"{intro}, although your code first moved a stage to {other}: a later .cuda() / .to(...) on a "
                "module that holds both stages moves every parameter of every submodule to that one device "
                f"({device}), which undoes the split. Move each stage on its own and do not move the whole model "
                "afterwards."
            )
        half = f"model[{SPLIT}:].to('cuda:1')" if device == "cuda:0" else f"model[:{SPLIT}].to('cuda:0')"
        pytest.fail(
            f"{intro}: every layer is on {device}, so {other} holds nothing. Put the other half on {other}: {half}."
        )
    layer_device = {_layer_of(n): d for n, d in devices.items()}
    first = [i for i, d in layer_device.items() if d == "cuda:0"]
    second = [i for i, d in layer_device.items() if d == "cuda:1"]
    if len(first) + len(second) == len(layer_device) and first and second:
        if max(first) < min(second):
            pytest.fail(
                f"{intro}: your split puts {_layers(first)} on cuda:0 and {_layers(second)} on cuda:1. The first "
                f"stage is exactly model[:{SPLIT}] (two Linear layers and their ReLUs) and the second model[{SPLIT}:] "
                "(the other two Linear layers)."
            )
        if max(second) < min(first):
            pytest.fail(
                f"{intro}: the two stages are swapped. The first stage, model[:{SPLIT}], goes on cuda:0, where the "
                f"batch comes, and the second, model[{SPLIT}:], on cuda:1."
            )
    pytest.fail(f"{intro}.")


def test_not_data_parallel(probe):
    seen = _probe(probe, "placement")
    if not seen["is_module"]:
        pytest.fail(f"split_model returned a {seen['type']}, not an nn.Module.")
    if _is_dp(seen):
        pytest.fail(
            "split_model wrapped the model in DataParallel: it replicates the whole model on every GPU and splits "
            "the batch between the replicas. That is data parallelism; model parallelism splits the model, so that "
            "each layer, and each parameter, lives once, on one GPU, and the whole batch goes through both."
        )
    if seen["foreign_params"]:
        pytest.fail(
            f"the module split_model returned holds {seen['foreign_params']} parameters that are not the given "
            "model's (copies, or new layers): split the layers you were given, so that training changes them."
        )
    if seen["param_count"] == 0:
        pytest.fail(
            "the module split_model returned has no parameters: pipe.parameters() finds only the layers registered "
            "as its submodules, that is assigned as attributes (self.first = model[:4]) or held in an "
            "nn.ModuleList or nn.Sequential. Layers kept in a plain Python list or dict, or not kept in the module "
            "at all, are not registered, and an optimizer over pipe.parameters() gets nothing to train."
        )
    if not seen["unique_param_count"] == seen["param_count"] == len(seen["model_param_devices"]):
        pytest.fail(
            f"the module split_model returned holds {seen['param_count']} parameters ({seen['unique_param_count']} "
            f"distinct) where the model has {len(seen['model_param_devices'])}: register each layer once."
        )


def test_activation_crosses_at_the_split(probe):
    seen = _probe(probe, "forward", rows=ROWS)
    if seen["error"]:
        feedback.fail(_forward_failure(seen))
    ins = [c for c in seen["calls"] if c[0] == "in"]
    ran = {c[1] for c in ins}
    missing = [i for i in range(LAYERS) if i not in ran]
    if missing:
        pytest.fail(
            f"pipe(x) never ran layer(s) {missing} of the model you were given: use its layers themselves (not "
            "copies), each once, in order."
        )
    off = [(c[1], c[2]) for c in ins if c[2] != _want(c[1])]
    if off:
        layer, device = min(off)  # a first-stage layer off its device says more than the ones after it
        where = {c[2] for c in ins if c[1] == layer}
        if layer < SPLIT and len(where) > 1:
            why = (
                f"layer {layer} of the first stage ran on {' and '.join(sorted(where))}: a copy of it ran on the "
                "other GPU, which is what DataParallel's replicas do. In model parallelism the first stage runs only "
                "on cuda:0."
            )
        elif layer < SPLIT:
            why = (
                f"layer {layer} of the first stage ran on {device}, so its input was already there. The first stage "
                f"is model[:{SPLIT}] (two Linear layers and their ReLUs) and runs on cuda:0: move the activation to "
                f"cuda:1 after model[{SPLIT - 1}], just before model[{SPLIT}]."
            )
        elif any(c[2] == "cuda:1" for c in ins if c[1] >= SPLIT):
            why = (
                f"layer {layer} of the second stage ran on {device}: the activation crossed to cuda:1 only after it. "
                f"The second stage is model[{SPLIT}:] (from the third Linear layer on): move the activation to "
                f"cuda:1 after model[{SPLIT - 1}], just before model[{SPLIT}]."
            )
        else:
            why = (
                f"layer {layer} of the second stage ran on {device}: the activation never crossed to cuda:1, so the "
                f"second GPU did nothing. Put model[{SPLIT}:] on cuda:1 and move the activation there between the "
                "stages."
            )
        pytest.fail(f"layers 0-{SPLIT - 1} must run on cuda:0 and layers {SPLIT}-{LAYERS - 1} on cuda:1; {why}")
    rows = {i: sum(c[3] for c in ins if c[1] == i) for i in range(LAYERS)}
    if set(rows.values()) != {ROWS}:
        pytest.fail(
            f"each layer should see the {ROWS} rows of the batch once (in one piece or in micro-batches); "
            f"rows per layer: {rows}."
        )
    out = seen["output"]
    if not (out["type"] == "Tensor" and out["device"] == "cuda:1"):
        where = f" on {out['device']}" if out.get("device") else ""
        pytest.fail(
            f"pipe(x) returned a {out['type']}{where}; expected the last layer's output, on cuda:1 where the second "
            "stage computed it."
        )


def test_output_matches_one_device(probe):
    seen = _probe(probe, "forward", rows=ROWS)
    if seen["error"]:
        feedback.fail(_forward_failure(seen))
    out = seen["output"]
    if out["type"] != "Tensor":
        pytest.fail(f"pipe(x) returned a {out['type']}, expected the model's output tensor.")
    if out["shape"] != [ROWS, 4]:
        chunks = sum(1 for c in seen["calls"] if c[0] == "in" and c[1] == LAYERS - 1)
        hint = _join_hint(out["shape"], ROWS, chunks)
        pytest.fail(f"pipe(x) for {ROWS} rows returned shape {out['shape']}; expected [{ROWS}, 4].{hint}")
    diff = float((out["values"] - _reference_output()).abs().max())
    if not diff < 1e-5:
        pytest.fail(
            f"pipe(x) differs from the same model run on one device by up to {diff:.3g}: splitting must not change "
            "what the model computes (the same layers, once each, in order)."
        )


def _train_failure(probe, seen) -> feedback.Explained:
    """Explain why train raised: in the forward pass, in a layer it fed, or in the loss."""
    err = seen["error"]
    got = feedback.raised(TRAIN_CALL, err["type"], err["message"])
    forward = _probe(probe, "forward", rows=ROWS)
    if forward["error"]:
        alone = _forward_failure(forward)
        return feedback.Explained(
            f"{TRAIN_CALL} failed, and so does the forward pass alone: {alone.message}", got.details
        )
    trail, loss_calls = seen.get("trail") or [], seen.get("loss_calls") or []
    if "empty parameter list" in err["message"] and seen.get("in_pipe") == []:
        return feedback.Explained(
            f"{TRAIN_CALL} failed as it built the optimizer: it got an empty parameter list, and the module "
            "split_model returned has no parameters registered, so pipe.parameters() is empty. pipe.parameters() "
            "finds only the layers held as its submodules, assigned as attributes (self.first = model[:4]) or in an "
            "nn.ModuleList or nn.Sequential; stages kept in a plain Python list or dict are not registered. Register "
            "the stages in split_model, so that torch.optim.SGD(pipe.parameters(), lr=lr) gets them.",
            got.details,
            got.cause,
        )
    if MIXED in err["message"] and trail and trail[-1][0] == "in":
        _, layer, device = trail[-1]
        weights = seen["model_param_devices"].get(f"{layer}.weight")
        if weights is not None and weights != device:
            said = (
                f"{TRAIN_CALL} failed in model[{layer}]: its weights are on {weights} and, in your train, its input "
                f"came on {device}."
            )
            if layer == 0:
                said += (
                    " pipe(x) itself works for a batch on cuda:0, so the batch train gave it was elsewhere: x arrives "
                    "on the CPU (as a DataLoader yields it). Move it to the first stage's device before the "
                    "forward, x = x.to('cuda:0')."
                )
            return feedback.Explained(said, got.details, got.cause)
    if loss_calls and not (trail and trail[-1][0] == "in"):
        call = loss_calls[-1]
        output, targets = call["output_device"], call["target_device"]
        if MIXED in err["message"] and output != targets:
            cpu = ", and y arrives on the CPU (as a DataLoader yields it)" if targets == "cpu" else ""
            return feedback.Explained(
                f"{TRAIN_CALL} failed in cross_entropy: it got the output on {output} and the targets on {targets}. "
                f"The loss compares the two, so both must be on one device: the output comes out where the last "
                f"stage ran{cpu}. Move the targets to the output's device, y.to('{output}'), or the output to the "
                "targets', out.to(y.device).",
                got.details,
                got.cause,
            )
        if call["output_shape"] != [TRAIN_ROWS, 4]:
            shape = call["output_shape"]
            chunks = sum(1 for c in forward["calls"] if c[0] == "in" and c[1] == LAYERS - 1)
            side_by_side = "along dim 1" in _join_hint((forward.get("output") or {}).get("shape"), ROWS, chunks)
            hint = (
                f" pipe(x) for a batch of {ROWS} rows shows why: your forward ran the last layer once per "
                "micro-batch and joined the outputs along dim 1, the class dimension. Join them along the batch "
                "dimension, torch.cat(outputs, dim=0)."
                if side_by_side
                else ""
            )
            return feedback.Explained(
                f"{TRAIN_CALL} failed in cross_entropy: it got an output of shape {shape} and {TRAIN_ROWS} targets, "
                f"where pipe(x) for the {TRAIN_ROWS} rows of x should return [{TRAIN_ROWS}, 4], one row of class "
                f"scores per target.{hint}",
                got.details,
                got.cause,
            )
    return got


def _frozen_problem(seen, frozen: list[str]) -> str:
    """Say why training left the parameters ``frozen`` unchanged, from what the train probe observed."""
    which = _layers(frozen)
    optim, grads = seen["optimizer"], seen["grads"]
    outside = [n for n in frozen if n not in seen.get("in_pipe", [])]
    if outside:
        copies = (
            f" (the optimizer trained {optim['foreign_held']} parameters that are not the given model's)"
            if optim["foreign_held"]
            else ""
        )
        return (
            f"training did not change {_layers(outside)}: the module split_model returned does not hold those "
            f"layers' parameters, it holds copies or new layers{copies}. Split and use the layers you were given, "
            f"model[:{SPLIT}] and model[{SPLIT}:] themselves."
        )
    if optim["steps"] == 0:
        return f"training did not change {which}: train never called optimizer.step()."
    no_grad = [n for n in frozen if grads[n]["arrived"] == 0]
    if no_grad:
        some = [n for n, g in grads.items() if g["arrived"]]
        first_cut = all(_layer_of(n) < SPLIT for n in no_grad) and all(
            grads[n]["arrived"] for n in grads if _layer_of(n) >= SPLIT
        )
        if first_cut:
            return (
                f"training did not change {_layers(no_grad)}, the first stage: loss.backward() gave its parameters "
                "no gradient at all, while the second stage's got theirs, so something cut the autograd graph "
                "between the stages. A .detach(), .data, torch.no_grad() or a new tensor built from the activation "
                "(torch.tensor(h)) hands the second stage a tensor without history. The device move itself, "
                "h.to('cuda:1'), is differentiable: use it on the activation as it is."
            )
        if some:
            return (
                f"training did not change {_layers(no_grad)}: loss.backward() gave their parameters no gradient at "
                "all, while other layers got theirs. Something cut the autograd graph before them (a .detach(), "
                ".data, torch.no_grad() or a new tensor built from an activation), or their parameters have "
                "requires_grad=False."
            )
        return (
            f"training did not change {which}: no parameter of the model got a gradient. Either train never called "
            "loss.backward(), or it called it on a loss without history (computed under torch.no_grad() or from "
            "detached values)."
        )
    not_held = [n for n in frozen if n not in optim["held"]]
    if not_held:
        return (
            f"training did not change {_layers(not_held)}: loss.backward() gave their parameters gradients, but the "
            f"optimizer does not hold them (it steps {len(optim['held'])} of the model's {len(grads)} parameters). "
            "Build it over both stages: torch.optim.SGD(pipe.parameters(), lr=lr)."
        )
    empty = [n for n in frozen if n not in optim["with_grad"]]
    if empty:
        return (
            f"training did not change {_layers(empty)}: the optimizer holds their parameters and loss.backward() "
            "gave them gradients, but at every optimizer.step() their gradients were empty (None or zero): step() "
            "ran before loss.backward(), or between zero_grad() and backward(). Each step goes zero_grad(), "
            "forward, loss, backward(), step()."
        )
    return (
        f"training did not change {which}, although the optimizer held their parameters and they had gradients when "
        f"it stepped: use torch.optim.SGD(pipe.parameters(), lr=lr) with the lr given ({LR})."
    )


def _training_problem(seen, losses: list[float], want: list[float], drift: float) -> str | None:
    """Say what differs from one-device training and, where the probe saw it, why."""
    diff = max(abs(a - b) for a, b in zip(losses, want, strict=True))
    if diff < 1e-4 and drift < 1e-4:
        return None
    rounded = [round(v, 4) for v in losses]
    frozen = [n for n, d in seen["changed"].items() if d == 0.0]
    if frozen:
        return _frozen_problem(seen, frozen)
    optim, grads = seen["optimizer"], seen["grads"]
    if any(grads[n]["onto_uncleared"] for n in optim["held"]):
        return (
            f"your losses {rounded} drift from the same model trained on one device {[round(v, 4) for v in want]}: "
            "loss.backward() added each step's gradients onto the ones left from the step before, which nothing had "
            "cleared, so every step used the sum of all gradients so far. Call optimizer.zero_grad() in every step, "
            "before loss.backward()."
        )
    calls = seen.get("loss_calls") or []
    if calls and calls[0]["reduction"] == "sum":
        return (
            f"your first loss is {losses[0]:.4g} where the same model on one device gives {want[0]:.4g}: you called "
            f"cross_entropy with reduction='sum', which adds up the {TRAIN_ROWS} rows' losses instead of averaging "
            f"them, so the loss and its gradients are {TRAIN_ROWS} times larger and SGD at lr={LR} overshoots. Use "
            "the default, mean reduction."
        )
    late = len(want) > 1 and all(abs(a - b) < 1e-4 for a, b in zip(losses[:-1], want[1:], strict=False))
    if late and drift < 1e-4:
        return (
            f"your training itself matches the same model trained on one device (the weights end up the same), but "
            f"the losses you returned, {rounded}, are each one step late: your first, {losses[0]:.4f}, is the "
            f"one-device loss of step 2 ({want[1]:.4f}), not of step 1 ({want[0]:.4f}). You recorded a loss "
            "computed after optimizer.step(), from a second forward pass on the updated weights, instead of the "
            "loss of the step's own forward, the one backward() used. Return loss.item() of that loss; one forward "
            "per step is enough."
        )
    if abs(losses[0] - want[0]) > 1e-4:
        ratio = losses[0] / want[0] if want[0] else 0.0
        if abs(ratio - TRAIN_ROWS) < 0.01 * TRAIN_ROWS:
            return (
                f"your first loss, before any step, is {losses[0]:.4g}, {TRAIN_ROWS} times the one-device model's "
                f"{want[0]:.4g}: the loss is summed over the {TRAIN_ROWS} rows instead of averaged (a sum reduction, "
                "or a mean multiplied by the batch size). Use cross_entropy's default mean."
            )
        shape = (
            f" (cross_entropy got an output of shape {calls[0]['output_shape']}, not [{TRAIN_ROWS}, 4])"
            if calls and calls[0]["output_shape"] != [TRAIN_ROWS, 4]
            else ""
        )
        return (
            f"your first loss, before any step, is {losses[0]:.4g} where the same model on one device gives "
            f"{want[0]:.4g}{shape}: the loss must be nn.functional.cross_entropy(pipe(x), y) over the whole batch of "
            f"{TRAIN_ROWS} rows, with its default arguments."
        )
    steps = (
        f" Your train called optimizer.step() {optim['steps']} times for {STEPS} losses; it should step once per loss."
        if optim["steps"] != STEPS
        else ""
    )
    if diff >= 1e-4:
        down = "" if losses[-1] < losses[0] else " (the loss did not go down)"
        return (
            f"your losses {rounded}{down} differ from the same model trained on one device "
            f"{[round(v, 4) for v in want]}: use torch.optim.SGD(pipe.parameters(), lr=lr) with the given lr and "
            f"cross_entropy on the whole batch, one step per iteration.{steps}"
        )
    return f"your losses match one-device training, but the trained weights differ from it by up to {drift:.3g}.{steps}"


def test_training_lowers_the_loss(probe):
    seen = _probe(probe, "train", steps=STEPS, lr=LR)
    if seen["error"]:
        feedback.fail(_train_failure(probe, seen))
    losses = seen["losses"]
    if losses is None:
        pytest.fail(
            f"train returned a {seen['returned']}; it should return a list of the {STEPS} losses, one per step."
        )
    if seen["count"] != STEPS:
        ran = seen["optimizer"]["steps"]
        pytest.fail(
            f"train returned {seen['count']} losses for steps={STEPS}; it should return one per step, {STEPS} in all"
            + (f" (it called optimizer.step() {ran} times: run exactly `steps` iterations)." if ran != STEPS else ".")
        )
    if None in losses:
        kinds = sorted({t for t, v in zip(seen["loss_types"], losses, strict=False) if v is None})
        pytest.fail(
            f"train returned values that are not single numbers ({', '.join(kinds)}): return each step's loss as a "
            "float, loss.item()."
        )
    want, params = _reference_training()
    drift = max(float((seen["params"][n] - p).abs().max()) for n, p in params.items())
    problem = _training_problem(seen, losses, want, drift)
    if problem:
        pytest.fail(problem)


def test_train_returns_floats(probe):
    seen = _probe(probe, "train", steps=STEPS, lr=LR)
    if seen["error"]:
        feedback.fail(_train_failure(probe, seen))
    if seen["returned"] != "list":
        pytest.fail(f"train returned a {seen['returned']}; it should return a list of the {STEPS} losses as floats.")
    others = sorted({t for t in seen["loss_types"] if t not in ("float", "float64")})
    if others:
        tensor = (
            " A tensor is not a float: it keeps its device and, unless detached, the step's whole autograd graph alive."
            if "Tensor" in others
            else ""
        )
        pytest.fail(
            f"train returned the losses as {', '.join(others)}, where the prompt asks for floats: return "
            f"loss.item(), a Python float, for each step.{tensor}"
        )
