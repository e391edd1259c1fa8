"""Probes for torch-model-parallel: build a seeded model next to the learner's code, call split_model and
train, and report only what happened (devices, the layers' calls, outputs, losses). The hidden tests decide.

The grader runs with two virtual CUDA devices (runner/vdev): each tensor and parameter reports the device it
was moved to, and an op mixing devices raises PyTorch's own "Expected all tensors to be on the same device"
error. The hidden tests import `build_model` and `data` from here to compute the single-device reference.
"""

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

SPLIT = 4  # model[:SPLIT] is the first stage (cuda:0), model[SPLIT:] the second (cuda:1)


def build_model(seed: int = 0) -> nn.Sequential:
    """Four Linear layers with ReLUs between them: 7 modules, two Linear layers in each half."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4)
    )


def data(rows: int = 64, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of inputs and class labels, both on the CPU (as a DataLoader yields them)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 8, generator=g), torch.randint(0, 4, (rows,), generator=g)


def _vdev():
    try:
        from runner.vdev import torch_cuda
    except ImportError:  # pragma: no cover - only outside the grader
        return None
    return torch_cuda


def _reset_moves() -> None:
    vc = _vdev()
    if vc is not None:
        vc.reset_moves()


def _moves() -> list:
    vc = _vdev()
    return [] if vc is None else [list(m) for m in vc.moves()]


def _error(exc: BaseException) -> dict:
    return {"type": type(exc).__name__, "message": str(exc)[:600]}


def _split(submission, seed: int):
    model = build_model(seed)
    _reset_moves()
    pipe = submission.split_model(model)
    return model, pipe


def placement(submission, seed: int = 0) -> dict:
    """Call split_model(build_model(seed)) and describe what came back and where every parameter is."""
    model, pipe = _split(submission, seed)
    own = {id(p): n for n, p in model.named_parameters()}
    seen = {
        "moves": _moves(),
        "type": f"{type(pipe).__module__}.{type(pipe).__qualname__}",
        "is_module": isinstance(pipe, nn.Module),
        "model_param_devices": {n: str(p.device) for n, p in model.named_parameters()},
    }
    if isinstance(pipe, nn.Module):
        mods = list(nn.Module.modules(pipe))
        seen["module_types"] = sorted({f"{c.__module__}.{c.__qualname__}" for m in mods for c in type(m).__mro__})
        params = [p for _, p in nn.Module.named_parameters(pipe, remove_duplicate=False)]
        seen["param_count"] = len(params)
        seen["unique_param_count"] = len({id(p) for p in params})
        seen["foreign_params"] = sum(1 for p in params if id(p) not in own)
    return seen


def forward(submission, seed: int = 0, rows: int = 16) -> dict:
    """Call split_model, hook every layer of the given model, and run the result on a batch on cuda:0."""
    model, pipe = _split(submission, seed)
    split_moves = _moves()
    calls: list = []
    for i, layer in enumerate(model):
        layer.register_forward_pre_hook(
            lambda mod, args, i=i: calls.append(["in", i, str(args[0].device), int(args[0].shape[0])])
        )
        layer.register_forward_hook(lambda mod, args, out, i=i: calls.append(["out", i, str(out.device)]))
    x, _ = data(rows)
    x = x.to("cuda:0")
    seen: dict = {"calls": calls, "error": None, "split_moves": split_moves}
    _reset_moves()
    seen["model_param_devices"] = {n: str(p.device) for n, p in model.named_parameters()}
    try:
        out = pipe(x)
    except Exception as exc:  # the learner's error, reported as data
        seen["error"] = _error(exc)
        seen["moves"] = _moves()
        return seen
    seen["moves"] = _moves()
    if isinstance(out, torch.Tensor):
        seen["output"] = {
            "type": "Tensor",
            "device": str(out.device),
            "shape": list(out.shape),
            "values": out.detach().cpu().clone(),
        }
    else:
        seen["output"] = {"type": type(out).__name__}
    return seen


def _layer_spy(model: nn.Sequential, trail: list) -> list:
    """Hook every layer of ``model``: append ["in", i, device] and ["out", i, device] to ``trail`` (the last 4)."""

    def note(entry: list) -> None:
        trail.append(entry)
        del trail[:-4]

    handles = []
    for i, layer in enumerate(model):
        handles.append(layer.register_forward_pre_hook(lambda mod, args, i=i: note(["in", i, _device_of(args)])))
        handles.append(layer.register_forward_hook(lambda mod, args, out, i=i: note(["out", i, _device_of(out)])))
    return handles


def _device_of(value) -> str:
    if isinstance(value, tuple | list) and value:
        value = value[0]
    return str(value.device) if isinstance(value, torch.Tensor) else type(value).__name__


def _nonzero(t) -> bool:
    return isinstance(t, torch.Tensor) and bool(t.detach().ne(0).any())


def train(submission, seed: int = 0, steps: int = 8, lr: float = 0.1) -> dict:
    """Call split_model, then the learner's train on a CPU batch; report the losses and what happened on the way.

    Besides the losses and the weights afterwards, it observes (and only observes): the last layer calls before
    an error; each cross_entropy call's output and targets (device, dtype, shape, reduction); for each parameter of
    the given model, how many gradients backward delivered to it and how many landed on a gradient no one had
    cleared since the one before; for each optimizer step, which of the model's parameters the optimizer held and
    which of them had a gradient at that moment.
    """
    model, pipe = _split(submission, seed)
    names = {id(p): n for n, p in model.named_parameters()}
    before = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
    x, y = data()
    seen: dict = {"error": None}
    if isinstance(pipe, nn.Module):
        held_by_pipe = {id(p) for p in nn.Module.parameters(pipe)}
        seen["in_pipe"] = [n for n, p in model.named_parameters() if id(p) in held_by_pipe]
    trail: list = []
    handles = _layer_spy(model, trail)
    grads = {n: {"arrived": 0, "onto_uncleared": 0} for n in names.values()}

    def arrived(name: str, param: torch.Tensor) -> None:
        grads[name]["arrived"] += 1
        if _nonzero(param.grad):
            grads[name]["onto_uncleared"] += 1

    for n, p in model.named_parameters():
        handles.append(p.register_hook(lambda g, n=n, p=p: arrived(n, p)))
    optim = {"steps": 0, "held": [], "foreign_held": 0, "with_grad": []}

    def stepping(optimizer, args, kwargs) -> None:
        held = [p for group in optimizer.param_groups for p in group["params"]]
        optim["steps"] += 1
        optim["held"] = sorted(set(optim["held"]) | {names[id(p)] for p in held if id(p) in names})
        optim["foreign_held"] = max(optim["foreign_held"], sum(1 for p in held if id(p) not in names))
        with_grad = {names[id(p)] for p in held if id(p) in names and _nonzero(p.grad)}
        optim["with_grad"] = sorted(set(optim["with_grad"]) | with_grad)

    handles.append(register_optimizer_step_pre_hook(stepping))
    loss_calls: list = []
    cross_entropy = nn.functional.cross_entropy

    depth = [0]  # torch's dispatch may call cross_entropy again from inside: note only the learner's calls

    def spy(input, target, *args, **kwargs):
        if depth[0] == 0 and len(loss_calls) < 2:
            loss_calls.append(
                {
                    "output_device": _device_of(input),
                    "output_shape": list(input.shape) if isinstance(input, torch.Tensor) else None,
                    "target_device": _device_of(target),
                    "target_dtype": str(target.dtype).removeprefix("torch.")
                    if isinstance(target, torch.Tensor)
                    else type(target).__name__,
                    "reduction": str(kwargs.get("reduction", args[4] if len(args) > 4 else "mean")),
                }
            )
        depth[0] += 1
        try:
            return cross_entropy(input, target, *args, **kwargs)
        finally:
            depth[0] -= 1

    nn.functional.cross_entropy = spy
    try:
        losses = submission.train(pipe, x, y, steps=steps, lr=lr)
    except Exception as exc:
        seen["error"] = _error(exc)
        losses = None
    finally:
        nn.functional.cross_entropy = cross_entropy
        for handle in handles:
            handle.remove()
    seen.update(trail=trail, loss_calls=loss_calls, grads=grads, optimizer=optim)
    seen["model_param_devices"] = {n: str(p.device) for n, p in model.named_parameters()}
    if seen["error"]:
        return seen
    seen["returned"] = type(losses).__name__
    if isinstance(losses, list | tuple):
        seen["loss_types"] = [type(v).__name__ for v in losses[:100]]
        seen["losses"] = [_as_float(v) for v in losses[:100]]
        seen["count"] = len(losses)
    else:
        seen["losses"] = None
        seen["repr"] = repr(losses)[:200]
    seen["changed"] = {n: float((p.detach().cpu() - before[n]).abs().max()) for n, p in model.named_parameters()}
    seen["params"] = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
    return seen


def _as_float(value) -> float | None:
    """The value as a float, where one number can be read from it (a float, an int, a one-element tensor)."""
    try:
        return float(value)
    except Exception:
        return None
