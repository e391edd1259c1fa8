"""Hidden tests for make_parallel. They run in the judge; the learner's code runs in the subject with two
virtual CUDA devices (see probes.py). Probes report what happened; the expectations and the words are here.
"""

import re

import torch
from probes import Net, batch
from runner import feedback

DP = "torch.nn.parallel.data_parallel.DataParallel"
ROWS = 6
# DataParallel.forward's own placement check (torch/nn/parallel/data_parallel.py): matched here, never shown.
PLACEMENT_CHECK = re.compile(
    r"module must have its parameters and buffers on device (?P<want>\S+) \(device_ids\[0\]\) "
    r"but found one of them on device: (?P<found>\S+)"
)


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?")) else text + "."


def _probe(probe, name, **kwargs):
    """Run a probe; when make_parallel itself raised, fail with what it was building and why it stopped."""
    try:
        return probe(name, **kwargs)
    except Exception as exc:  # the learner's exception, carried over as data
        _fail_make_parallel(probe, exc)


def _fail_make_parallel(probe, exc):
    type_name = getattr(exc, "type_name", type(exc).__name__)
    message = str(exc.args[0]) if exc.args else ""
    line = getattr(exc, "line", None)
    where = f" (your code, line {line})" if line else ""
    try:
        built = probe("built")
    except Exception:  # only a hint: without it the message says less
        built = []
    ddp = [b for b in built if b["class"] == "DistributedDataParallel"]
    dp_failed = [b for b in built if b["class"] == "DataParallel" and b["raised"]]
    if ddp:
        got = feedback.explain(type_name, message)
        why = ": it needs a process group (dist.init_process_group), and none exists"
        feedback.fail(
            f"make_parallel built a DistributedDataParallel{where}, and its constructor raised {type_name}"
            + (why if got.cause == "process_group.missing" else "")
            + ". This exercise asks for nn.DataParallel, not DistributedDataParallel: one Python process that "
            "drives both GPUs, with no process group (DistributedDataParallel runs one process per GPU, each after "
            "dist.init_process_group). Return nn.DataParallel(model) with the model on cuda:0.",
            details=got.details,
        )
    if dp_failed:
        args = dp_failed[-1]["args"]
        call = "nn.DataParallel(model" + "".join(f", {k}={v}" for k, v in args.items()) + ")"
        if dp_failed[-1]["arg_types"].get("device_ids") == "int":
            got = feedback.explain(type_name, message)
            feedback.fail(
                f"make_parallel called {call}{where}, and DataParallel's constructor raised {type_name}: "
                "device_ids takes a list of GPU indices, such as [0, 1] or "
                "list(range(torch.cuda.device_count())), not the number of GPUs. Leave it out to use every "
                "visible GPU.",
                details=got.details,
            )
        ids, gpus = dp_failed[-1].get("ids"), dp_failed[-1].get("gpus")
        missing = [i for i in ids or [] if isinstance(gpus, int) and not 0 <= i < gpus]
        if missing and gpus:
            got = feedback.explain(type_name, message)
            names = " and ".join(f"GPU {i}" for i in missing[:4])
            visible = ", ".join(f"cuda:{i}" for i in range(gpus))
            start_at_one = ids == list(range(1, len(ids) + 1))
            feedback.fail(
                f"make_parallel called {call}{where}, and DataParallel's constructor raised {type_name}: "
                f"device_ids names {names}, but torch.cuda.device_count() is {gpus} here, so the GPUs are "
                f"{visible}"
                + (" (CUDA numbers GPUs from 0, not from 1)" if start_at_one else "")
                + ". Build the list from what is visible, list(range(torch.cuda.device_count())), or leave "
                "device_ids out: the default is every visible GPU.",
                details=got.details,
            )
        got = feedback.raised(f"{call} in make_parallel", type_name, message)
        feedback.fail(f"{got.message[:-1]}{where}.", details=got.details)
    got = feedback.raised("make_parallel(Net())", type_name, message)
    feedback.fail(f"{got.message[:-1]}{where}.", details=got.details)


def _moves(seen):
    moves = [f"{what}: {src} -> {dst}" for what, src, dst in seen.get("moves", [])]
    if len(moves) > 4:
        moves = [*moves[:4], f"and {len(moves) - 4} more"]
    return ", ".join(moves) if moves else "no move at all"


def _is_dp(seen):
    return DP in seen["mro"]


def _float32(seen) -> str:
    """'' when every parameter is float32, else what the parameters are (the batch is float32)."""
    kinds = sorted(set(seen.get("param_dtypes", {}).values()) - {"float32"})
    return " and ".join(kinds)


def _eval_mode(seen) -> str:
    """Why the numbers differ when make_parallel left (part of) the model in eval mode, else ''."""
    off = seen.get("not_training") or []
    if not off:
        return ""
    which = "the model" if "the model" in off else "its layers " + ", ".join(off[:3])
    return (
        f"make_parallel left {which} in eval mode (.training is False): BatchNorm then normalises with its "
        "running statistics instead of each chunk's own, and no longer updates them. A model ready for training "
        "stays in training mode, as you were given it: do not call model.eval() here"
    )


def _placement(seen):
    """What is wrong with where the parameters and buffers are, as (which, why), or None when all are on cuda:0."""
    params, buffers = seen["param_devices"], seen["buffer_devices"]
    wrong = {n: d for n, d in {**params, **buffers}.items() if d != "cuda:0"}
    if not wrong:
        return None
    names = ", ".join(f"{n} on {d}" for n, d in list(wrong.items())[:3])
    if len(wrong) > 3:
        names += f" (and {len(wrong) - 3} more)"
    found = sorted(set(wrong.values()))
    params_wrong = [n for n in params if params[n] != "cuda:0"]
    moves = seen.get("moves", [])
    tensor_moves = [m for m in moves if m[0] == "tensor" and m[2].startswith("cuda")]
    module_moves = [m for m in moves if m[0].startswith("module")]
    if found == ["cpu"] and params and not params_wrong:
        why = (
            "your code moved the parameters but not the buffers (BatchNorm's running statistics): DataParallel "
            "needs both on device_ids[0]. model.to('cuda:0') or model.cuda() moves parameters and buffers together"
        )
    elif found == ["cpu"] and len(wrong) == len(params) + len(buffers) and tensor_moves and not module_moves:
        why = (
            f"your code moved {len(tensor_moves)} tensor{'s' if len(tensor_moves) != 1 else ''} to the GPU with "
            "Tensor.to or Tensor.cuda, yet every parameter and buffer of the model is still on the CPU: both "
            "return a moved copy and leave the tensor they were called on where it was (Module.to, by contrast, "
            "moves a module's own parameters and buffers). "
            "Use model.to('cuda:0') or model.cuda()"
        )
    elif found == ["cpu"]:
        why = (
            "they are still on the CPU: nn.DataParallel does not move the model for you (with more than one "
            "device id), so move it with model.to('cuda:0') or model.cuda(), before or after wrapping. "
            f"Moves your code made: {_moves(seen)}"
        )
    else:
        why = (
            f"they are on {', '.join(found)}: DataParallel keeps the real model on device_ids[0], which is "
            "cuda:0 here (model.to('cuda') and model.cuda() mean cuda:0 too). "
            f"Moves your code made: {_moves(seen)}"
        )
    return names, why


def _reference(sizes, rows=ROWS, seed=0):
    """What the learner's model computes for the chunks it really ran (DataParallel on two GPUs: two halves):
    each chunk through the model, outputs concatenated, gradients of all chunks summed into the one model
    (BatchNorm normalises each chunk on its own GPU). `sizes` are the observed chunk sizes, so this test does
    not depend on how the batch was split (test_batch_split_across_both_gpus grades that)."""
    net = Net(seed)
    x = batch(rows)
    if sum(sizes) != rows or not sizes:
        sizes = [len(c) for c in x.chunk(2)]
    out = torch.cat([net(part) for part in x.split(list(sizes))])
    out.sum().backward()
    return out.detach(), {n: p.grad.detach() for n, p in net.named_parameters()}


def _fail_forward(seen):
    """model(x) raised: say where and why, from what the probe observed before the forward pass."""
    err, d = seen["error"], {**seen["described"], "moves": seen.get("moves", [])}
    text = err["message"]
    start = f"model(x) for a batch of {ROWS} rows on cuda:0"
    check = PLACEMENT_CHECK.search(text)
    if check and err["type"] == "RuntimeError":
        want, found = check["want"], check["found"]
        said = (
            f"{start} stopped before running: DataParallel's forward first checks that every parameter and "
            f"buffer is on device_ids[0], here {want}, and found one on {found}."
        )
        ids = d.get("device_ids")
        if want != "cuda:0" and isinstance(ids, list):
            said += (
                f" Your device_ids={ids} starts with {ids[0]}: DataParallel expects the real model on the first GPU "
                "in device_ids. List cuda:0 first (device_ids=[0, 1]) or leave device_ids out."
            )
        else:
            placed = _placement(d)
            if placed is not None:
                said += f" Found {placed[0]}: {_sentence(placed[1])}"
        feedback.fail(said, details=f"{err['type']}: {text}")
    replica = err.get("replica")
    if replica:
        device = f"cuda:{replica['device']}"
        details = f"{replica['type']}: {replica['message']}"
        if d.get("dim") not in (0, None) and isinstance(d.get("dim"), int):
            feedback.fail(
                f"{start} failed in the copy of your model on {device}: your DataParallel cuts the batch along "
                f"dim={d['dim']}, not along the rows, so each GPU got all {ROWS} rows and only some of the 4 input "
                "columns, which the model's first Linear(4, 8) cannot take. DataParallel splits along dim 0 (the "
                "batch) by default: leave dim out.",
                details=details,
            )
        dtypes = _float32(d)
        if dtypes:
            feedback.fail(
                f"{start} failed in the copy of your model on {device}: your model's parameters are {dtypes} but "
                "the batch is float32, and a layer needs its weights and input in one dtype. make_parallel changed "
                "the model's dtype (.half(), .to(torch.float16), ...): only move the model, keep its dtype.",
                details=details,
            )
        got = feedback.raised(f"{start}: the copy of your model on {device}", replica["type"], replica["message"])
        feedback.fail(got.message, details=got.details)
    got = feedback.raised(start, err["type"], text)
    feedback.fail(got.message, details=got.details)


def test_returns_a_dataparallel(probe):
    seen = _probe(probe, "inspect")
    built_dp = any(b["class"] == "DataParallel" for b in seen.get("built", []))
    if _is_dp(seen):
        if seen["wraps_model"]:
            return
        if seen["contains_model"]:
            inner = seen.get("inner_type") or "module"
            compiled = inner.endswith("OptimizedModule")
            feedback.fail(
                f"make_parallel returned an nn.DataParallel whose module is a {inner} that holds the model it was "
                "given, not that model itself"
                + (
                    ": torch.compile(model) returns a new module (an OptimizedModule) around your model. "
                    "Compiling is not part of this task"
                    if compiled
                    else ""
                )
                + ". Wrap the given model directly, nn.DataParallel(model), so that its .module is that model."
            )
        feedback.fail(
            "make_parallel returned an nn.DataParallel that does not hold the model it was given: the module "
            "inside it is another object (a copy, such as copy.deepcopy(model), or a new model). Training it "
            "would never update the caller's model, and an optimizer built on model.parameters() would train "
            "nothing. Move and wrap the given model itself (Module.to moves it in place)."
        )
    if seen["is_model"]:
        if built_dp:
            feedback.fail(
                "your code built an nn.DataParallel, but make_parallel returned the model itself, not the "
                "wrapper: return what nn.DataParallel(...) gave you. The bare model runs on one GPU only."
            )
        feedback.fail(
            "make_parallel returned the model it was given, unwrapped: no nn.DataParallel was built while it ran. "
            "Moving a model to the GPU uses one GPU only; wrap it: nn.DataParallel(model) splits each batch across "
            "all GPUs. (If your code wraps only under a condition: the grader shows 2 GPUs, "
            "torch.cuda.device_count() == 2.)"
        )
    if seen["claimed_type"] != seen["type"] and seen["claimed_type"].endswith("DataParallel"):
        feedback.fail(
            f"make_parallel returned a {seen['type']} that claims to be a {seen['claimed_type']} but is not one "
            "(its real type does not inherit from nn.DataParallel). Return torch.nn.DataParallel(model) "
            "(or an instance of a genuine subclass of it)."
        )
    same_name = " (a class of your own with that name is not torch's)" if seen["name"] == "DataParallel" else ""
    feedback.fail(
        f"make_parallel returned a {seen['type']}, which does not inherit from nn.DataParallel{same_name}; "
        "expected a torch.nn.DataParallel (type() must be nn.DataParallel or a real subclass of it). An object "
        "with `module` and `device_ids` attributes is not enough: only DataParallel's forward scatters the batch, "
        "replicates the model and gathers the outputs."
    )


def test_uses_every_gpu_and_gathers_on_cuda0(probe):
    seen = _probe(probe, "inspect")
    if not _is_dp(seen):
        what = f"your model itself (a {seen['name']})" if seen["is_model"] else f"a {seen['type']}"
        feedback.fail(f"make_parallel returned {what}, not an nn.DataParallel, so it has no GPU list (device_ids).")
    ids, out = seen["device_ids"], seen["output_device"]
    problems = []
    if ids != [0, 1]:
        if isinstance(ids, list) and sorted(ids) == [0, 1]:
            problems.append(
                f"device_ids={ids}, which lists both GPUs but not in order: device_ids[0] is the GPU that holds "
                f"the real model, where DataParallel expects its parameters (cuda:{ids[0]} here). Use "
                "device_ids=[0, 1] or leave device_ids out."
            )
        elif isinstance(ids, list) and len(ids) == 1:
            problems.append(
                f"device_ids={ids}, which names one GPU, so DataParallel runs the whole batch there. Leave "
                "device_ids out (the default is every visible GPU) or pass [0, 1]."
            )
        else:
            problems.append(
                f"device_ids={ids}; with 2 visible GPUs it should be [0, 1]. Leave device_ids out (the default is "
                "every visible GPU) or pass [0, 1]."
            )
    if out != 0:
        problems.append(
            f"output_device={out}, so it gathers the outputs on cuda:{out}, and the task asks for cuda:0. Pass "
            "output_device=0 or leave it out (it defaults to device_ids[0])."
        )
    if problems:
        feedback.fail("Your DataParallel has " + " It also has ".join(problems))


def test_parameters_and_buffers_on_first_gpu(probe):
    seen = _probe(probe, "inspect")
    if not seen["param_devices"] and not seen["buffer_devices"]:
        feedback.fail(f"make_parallel returned a {seen['type']} with no parameters at all; return the wrapped model.")
    placed = _placement(seen)
    if placed is None:
        return
    names, why = placed
    feedback.fail(f"all parameters and buffers must be on cuda:0 (device_ids[0]) but found {names}; {_sentence(why)}")


def test_forward_on_cuda0_batch(probe):
    seen = _probe(probe, "forward", rows=ROWS, backward=False)
    if seen["error"]:
        _fail_forward(seen)
    d = seen["described"]
    out = seen["output"]
    if out["type"] != "Tensor":
        feedback.fail(f"model(x) returned a {out['type']}, expected the model's output tensor.")
    if out["device"] != "cuda:0" or out["shape"] != [ROWS, 3]:
        why = "DataParallel gathers the replicas' outputs on output_device, which defaults to device_ids[0]"
        if out["device"] != "cuda:0" and d.get("output_device") not in (0, None):
            why = f"your DataParallel has output_device={d['output_device']}, and DataParallel gathers there"
        feedback.fail(
            f"model(x) for a batch of shape [{ROWS}, 4] on cuda:0 returned a tensor of shape {out['shape']} on "
            f"{out['device']}; expected shape [{ROWS}, 3] on cuda:0: {why}."
        )
    want, _ = _reference([n for _, n in seen["calls"]])
    diff = float((out["values"] - want).abs().max())
    if diff < 1e-5:
        return
    if _eval_mode(d):
        feedback.fail(f"model(x) gave different numbers than in training mode (by up to {diff:.2g}): {_eval_mode(d)}.")
    if _float32(d):
        feedback.fail(
            f"model(x) gave different numbers (by up to {diff:.2g}) than your model in float32: its parameters are "
            f"{_float32(d)}. make_parallel should move the model, not change its dtype."
        )
    feedback.fail(
        f"model(x) gave different numbers than the model you were given, run on each chunk of the batch (by up to "
        f"{diff:.2g}): make_parallel must wrap that model with its weights unchanged."
    )


def test_batch_split_across_both_gpus(probe):
    seen = _probe(probe, "forward", rows=ROWS, backward=False)
    d = seen["described"]
    calls = sorted(tuple(c) for c in seen["calls"])
    if calls == [("cuda:0", 3), ("cuda:1", 3)] and not seen["error"]:
        return
    ran = ", ".join(f"{rows} rows on {device}" for device, rows in calls)
    if seen["error"]:
        said = (
            f"model(x) on a cuda:0 batch of {ROWS} rows failed (the forward test says why) before both GPUs had run "
            "their half of it" + (f"; your model was reached with {ran}." if ran else ".")
        )
    else:
        said = (
            f"a batch of {ROWS} rows reached your model as: {ran or 'nothing'}. With DataParallel on 2 GPUs each "
            "GPU runs a copy of the model on its half of the batch: 3 rows on cuda:0 and 3 rows on cuda:1."
        )
    if not _is_dp(d):
        said += " make_parallel did not return an nn.DataParallel, so nothing split the batch."
    elif isinstance(d.get("device_ids"), list) and len(d["device_ids"]) == 1:
        said += f" Your DataParallel has device_ids={d['device_ids']}: one GPU."
    elif isinstance(d.get("dim"), int) and d["dim"] != 0:
        said += f" Your DataParallel splits along dim={d['dim']}, not along the rows (dim 0, the default)."
    elif d.get("own_forward"):
        said += (
            f" Your class {d['own_forward']} defines its own forward in place of DataParallel's, and "
            "nn.DataParallel.forward is what scatters the batch, replicates the model and gathers the outputs: "
            "end yours with return super().forward(*inputs, **kwargs), or do not override forward."
        )
    feedback.fail(said)


def test_gradients_reach_the_model_on_cuda0(probe):
    seen = _probe(probe, "forward", rows=ROWS, backward=True)
    if seen["error"] or seen.get("output", {}).get("type") != "Tensor":
        feedback.fail("model(x) on a cuda:0 batch did not return an output tensor, so no gradient could flow.")
    if seen.get("backward_error"):
        err = seen["backward_error"]
        got = feedback.raised("model(x).sum().backward()", err["type"], err["message"])
        feedback.fail(got.message, details=got.details)
    d = seen["described"]
    _, want = _reference([n for _, n in seen["calls"]])
    for name, expected in want.items():
        got = seen["grads"].get(name)
        if got is None:
            if not d["contains_model"]:
                feedback.fail(
                    f"after model(x).sum().backward() the parameter {name} of the model make_parallel was given has "
                    "no gradient: what make_parallel returned does not hold that model (a copy, or a new model), "
                    "so the optimizer built on it would train nothing. Wrap that very model."
                )
            feedback.fail(
                f"after model(x).sum().backward() the parameter {name} of the model make_parallel was given has "
                "no gradient, although the model is inside what make_parallel returned: its requires_grad was "
                "turned off, or the forward did not use it."
            )
        if got["device"] != "cuda:0":
            feedback.fail(f"the gradient of {name} is on {got['device']}; expected cuda:0, where the model lives.")
        diff = float((got["value"] - expected).abs().max())
        if diff >= 1e-4:
            if _eval_mode(d):
                feedback.fail(
                    f"the gradient of {name} differs from training mode's (by up to {diff:.2g}): {_eval_mode(d)}."
                )
            feedback.fail(
                f"the gradient of {name} differs from the sum of the chunks' gradients (by up to {diff:.2g}); "
                "DataParallel sums the replicas' gradients into the model you were given, so wrap that model with "
                "its weights, dtype and training mode unchanged."
            )


def test_model_otherwise_unchanged(probe):
    seen = _probe(probe, "inspect")
    given = Net(0)
    want_layers = {n: type(m).__qualname__ for n, m in given.named_modules() if n}
    got_layers = seen.get("model_layers", {})
    swapped = [n for n in want_layers if got_layers.get(n) != want_layers[n]]
    if swapped:
        changes = ", ".join(
            f"{n} is now a {got_layers[n]}, not the {want_layers[n]} it was given"
            if n in got_layers
            else f"{n} ({want_layers[n]}) is gone"
            for n in swapped[:3]
        )
        sync = ""
        if any(got_layers.get(n) == "SyncBatchNorm" for n in swapped):
            sync = (
                " SyncBatchNorm shares batch statistics only across the processes of a process group "
                "(DistributedDataParallel, one process per GPU); in one process, with no process group, it "
                "normalises like the BatchNorm it replaced."
            )
        feedback.fail(
            f"make_parallel changed the model's layers: {changes}.{sync} make_parallel should move the model and "
            "wrap it, and keep its layers as they were."
        )
    values = seen.get("model_values", {})
    kinds = sorted(
        {str(t.dtype).removeprefix("torch.") for n, t in values.items() if n in dict(given.named_parameters())}
    )
    if kinds and kinds != ["float32"]:
        feedback.fail(
            f"after make_parallel the model's parameters are {' and '.join(kinds)}, not float32 as it was given: "
            "make_parallel changed the model's dtype (.half(), .to(torch.float16), ...). Only move the model, "
            "keep its dtype."
        )
    if _eval_mode(seen):
        feedback.fail(f"{_eval_mode(seen)}.")
    want = dict([*given.named_parameters(), *given.named_buffers()])
    changed = {}
    for name, expected in want.items():
        got = values.get(name)
        if got is None or tuple(got.shape) != tuple(expected.shape):
            changed[name] = None
        elif not torch.equal(got.float(), expected.detach().float()):
            changed[name] = float((got.float() - expected.detach().float()).abs().max())
    if not changed:
        return
    params = [n for n in changed if n in dict(given.named_parameters())]
    counted = [n for n in changed if n.endswith("num_batches_tracked")]
    stats = [n for n in changed if n not in params and n not in counted]
    said = []
    if params:
        by = [v for n, v in changed.items() if n in params and v is not None]
        said.append(
            f"make_parallel changed the values of {', '.join(params[:4])}"
            + (f" (by up to {max(by):.2g})" if by else "")
            + ": the weights must stay the ones the model was given. Re-initialising layers (nn.init..., "
            "reset_parameters()), an optimizer step or loading other weights would each do that; make_parallel "
            "should only move the model."
        )
    if counted:
        name = counted[0]
        runs = int(values[name].item()) if values.get(name) is not None and values[name].numel() == 1 else None
        if runs:
            updated = f", and those passes updated {', '.join(stats[:2])}" if stats else ""
            said.append(
                f"{name} is {runs}, not 0: BatchNorm counts the forward passes it runs in training mode, so "
                f"make_parallel ran the model in training mode {runs} time{'s' if runs != 1 else ''}{updated} "
                "(torch.no_grad() does not stop BatchNorm from updating its running statistics). Run no forward "
                "pass in make_parallel: it should only move and wrap the model."
            )
            stats = []
    if stats:
        said.append(
            f"make_parallel changed the buffers {', '.join(stats[:3])} (BatchNorm's running statistics): the model "
            "must keep the buffers it was given. make_parallel should only move the model."
        )
    feedback.fail(" ".join(said))
