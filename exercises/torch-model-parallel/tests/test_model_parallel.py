"""Hidden tests for split_model and train. They run in the judge; the learner's code runs in the subject with two
virtual CUDA devices (see probes.py). Probes report what happened; the expectations are computed here, on the
CPU, from the same seeded model trained on one device.
"""

import pytest
import torch
from probes import SPLIT, build_model, data

ROWS, STEPS, LR = 16, 8, 0.1
LAYERS = len(build_model())
DP_TYPES = ("torch.nn.parallel.data_parallel.DataParallel", "torch.nn.parallel.distributed.DistributedDataParallel")
MIXED = "Expected all tensors to be on the same device"


def _probe(probe, name, **kwargs):
    try:
        return probe(name, **kwargs)
    except Exception as exc:  # the learner's exception, turned into feedback
        pytest.fail(f"split_model(model) raised {type(exc).__name__}: {exc}")


def _want(layer: int) -> str:
    return "cuda:0" if layer < SPLIT else "cuda:1"


def _layer_of(name: str) -> int:
    return int(name.split(".", 1)[0])


def _is_dp(seen) -> bool:
    return any(t in DP_TYPES for t in seen.get("module_types", []))


def _undone_split(moves) -> bool:
    """Whether a module was moved to cuda:1 and later a module move sent parameters to cuda:0."""
    to_second = [i for i, (what, _, dst) in enumerate(moves) if what.startswith("module") and dst == "cuda:1"]
    return bool(to_second) and any(
        what.startswith("module") and dst == "cuda:0" for what, _, dst in moves[to_second[0] + 1 :]
    )


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


def _sentence(text: str) -> str:
    return text if text.endswith((".", "!", "?")) else f"{text}."


def _forward_failure(seen) -> str:
    """Explain why the forward pass raised, from where the layers' inputs and weights were."""
    err = seen["error"]
    text = _sentence(f"pipe(x) for a batch x on cuda:0 raised {err['type']}: {err['message']}")
    if MIXED not in err["message"] or not seen["calls"]:
        return text
    _, layer, got, _ = [c for c in seen["calls"] if c[0] == "in"][-1]
    weights = seen["model_param_devices"].get(f"{layer}.weight")
    if weights is None or weights == got:
        return text
    if got == "cuda:0" and weights == "cuda:1":
        return (
            f"{text} model[{layer}], the first layer of the second stage, has its weights on cuda:1 but got its "
            "input from the first stage on cuda:0: a layer only computes on tensors on its own device, and nothing "
            "moves the activation for you. In forward, move the activation to cuda:1 between the stages: "
            "self.second(h.to('cuda:1'))."
        )
    if got == "cuda:1" and weights == "cuda:0":
        return (
            f"{text} Your forward moved the activation to cuda:1, but model[{layer}]'s weights are on cuda:0: "
            "something moved the second stage back (a .cuda() or .to('cuda') on a module that contains both stages "
            "moves every parameter to that one device and undoes the split)."
        )
    return f"{text} model[{layer}] has its weights on {weights} but got its input on {got}."


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
    if found == {"cpu"}:
        pytest.fail(f"{intro}: nothing was moved. Move model[:{SPLIT}] to cuda:0 and model[{SPLIT}:] to cuda:1.")
    if _is_dp(seen):
        pytest.fail(
            f"{intro}. You wrapped the model in DataParallel, which keeps the whole model on cuda:0 and copies it "
            "to every GPU for each batch (replicas, not a split): every GPU must still hold the whole model. "
            "Model parallelism places each half on its own GPU, once."
        )
    if found == {"cuda:0"} and _undone_split(seen["moves"]):
        pytest.fail(
            f"{intro}, although your code first moved a stage to cuda:1: a later .cuda() / .to('cuda') on a module "
            "that holds both stages moves every parameter of every submodule to that one device, which undoes the "
            "split. Move each stage on its own and do not move the whole model afterwards."
        )
    if found == {"cuda:0"}:
        pytest.fail(
            f"{intro}: every layer is on cuda:0, so the second GPU holds nothing. Put the second half on the other "
            f"GPU: model[{SPLIT}:].to('cuda:1')."
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
    assert seen["unique_param_count"] == seen["param_count"] == len(seen["model_param_devices"]), (
        f"the module split_model returned holds {seen['param_count']} parameters ({seen['unique_param_count']} "
        f"distinct) where the model has {len(seen['model_param_devices'])}: register each layer once."
    )


def test_activation_crosses_at_the_split(probe):
    seen = _probe(probe, "forward", rows=ROWS)
    if seen["error"]:
        pytest.fail(_forward_failure(seen))
    ran = {c[1] for c in seen["calls"] if c[0] == "in"}
    missing = [i for i in range(LAYERS) if i not in ran]
    assert not missing, (
        f"pipe(x) never ran layer(s) {missing} of the model you were given: use its layers themselves (not copies), "
        "each once, in order."
    )
    off = [(c[1], c[2]) for c in seen["calls"] if c[2] != _want(c[1])]
    if off:
        layer, device = min(off)  # a first-stage layer off its device says more than the ones after it
        if layer < SPLIT:
            why = (
                f"layer {layer} of the first stage ran on {device}: a copy of it ran on the other GPU, which is what "
                "DataParallel's replicas do. In model parallelism the first stage runs only on cuda:0."
            )
        else:
            why = (
                f"layer {layer} of the second stage ran on {device}: the activation never crossed to cuda:1, so the "
                f"second GPU did nothing. Put model[{SPLIT}:] on cuda:1 and move the activation there between the "
                "stages."
            )
        pytest.fail(f"layers 0-{SPLIT - 1} must run on cuda:0 and layers {SPLIT}-{LAYERS - 1} on cuda:1; {why}")
    rows = {i: sum(c[3] for c in seen["calls"] if c[0] == "in" and c[1] == i) for i in range(LAYERS)}
    assert set(rows.values()) == {ROWS}, (
        f"each layer should see the {ROWS} rows of the batch once (in one piece or in micro-batches); "
        f"rows per layer: {rows}."
    )
    out = seen["output"]
    assert out["type"] == "Tensor" and out["device"] == "cuda:1", (
        f"pipe(x) returned {out['type']} on {out.get('device')}; expected the last layer's output, on cuda:1 "
        "where the second stage computed it."
    )


def test_output_matches_one_device(probe):
    seen = _probe(probe, "forward", rows=ROWS)
    if seen["error"]:
        pytest.fail(_forward_failure(seen))
    out = seen["output"]
    assert out["type"] == "Tensor", f"pipe(x) returned a {out['type']}, expected the model's output tensor."
    assert out["shape"] == [ROWS, 4], f"pipe(x) returned shape {out['shape']}; expected [{ROWS}, 4]."
    diff = float((out["values"] - _reference_output()).abs().max())
    assert diff < 1e-5, (
        f"pipe(x) differs from the same model run on one device by up to {diff:.3g}: splitting must not change "
        "what the model computes (the same layers, once each, in order)."
    )


def test_training_lowers_the_loss(probe):
    seen = _probe(probe, "train", steps=STEPS, lr=LR)
    if seen["error"]:
        err = seen["error"]
        text = _sentence(f"train(pipe, x, y, steps={STEPS}, lr={LR}) raised {err['type']}: {err['message']}")
        forward = _probe(probe, "forward", rows=ROWS)
        if forward["error"]:
            pytest.fail(f"{text} The forward pass itself fails: {_forward_failure(forward)}")
        if MIXED in err["message"]:
            pytest.fail(
                f"{text} The loss compares the output with the targets, so both must be on one device: the output "
                "is on cuda:1, where the last stage ran, and y arrives on the CPU (as a DataLoader yields it). Move "
                "the targets to the output's device, y.to('cuda:1'), or the output to the targets', out.to(y.device)."
            )
        pytest.fail(text)
    losses = seen["losses"]
    assert isinstance(losses, list) and len(losses) == STEPS, (
        f"train should return a list of the {STEPS} losses, one per step; it returned {losses!r}."
    )
    want, params = _reference_training()
    assert losses[-1] < losses[0], f"the loss did not go down over {STEPS} SGD steps: {losses}."
    frozen = sorted({_layer_of(n) for n, d in seen["changed"].items() if d == 0.0})
    assert not frozen, (
        f"training did not change layer(s) {frozen}: the optimizer must hold both stages' parameters, "
        "torch.optim.SGD(pipe.parameters(), lr=lr)."
    )
    diff = max(abs(a - b) for a, b in zip(losses, want, strict=True))
    assert diff < 1e-4, (
        f"your losses {[round(v, 4) for v in losses]} differ from the same model trained on one device "
        f"{[round(v, 4) for v in want]}: use SGD with the given lr and cross_entropy on the whole batch at each step."
    )
    drift = max(float((seen["params"][n] - p).abs().max()) for n, p in params.items())
    assert drift < 1e-4, f"the trained weights differ from one-device training by up to {drift:.3g}."
