"""Probes for torch-model-parallel: build a seeded model next to the learner's code, call split_model and
train, and report only what happened (devices, the layers' calls, outputs, losses). The hidden tests decide.

The grader runs with two virtual CUDA devices (runner/vdev): each tensor and parameter reports the device it
was moved to, and an op mixing devices raises PyTorch's own "Expected all tensors to be on the same device"
error. The hidden tests import `build_model` and `data` from here to compute the single-device reference.
"""

import torch
from torch import nn

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
    calls: list = []
    for i, layer in enumerate(model):
        layer.register_forward_pre_hook(
            lambda mod, args, i=i: calls.append(["in", i, str(args[0].device), int(args[0].shape[0])])
        )
        layer.register_forward_hook(lambda mod, args, out, i=i: calls.append(["out", i, str(out.device)]))
    x, _ = data(rows)
    x = x.to("cuda:0")
    _reset_moves()
    seen: dict = {"calls": calls, "error": None}
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


def train(submission, seed: int = 0, steps: int = 8, lr: float = 0.1) -> dict:
    """Call split_model, then the learner's train on a CPU batch; report the losses and what changed."""
    model, pipe = _split(submission, seed)
    before = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
    x, y = data()
    seen: dict = {"error": None}
    try:
        losses = submission.train(pipe, x, y, steps=steps, lr=lr)
    except Exception as exc:
        seen["error"] = _error(exc)
        return seen
    seen["losses"] = [float(v) for v in losses] if isinstance(losses, list | tuple) else repr(losses)[:200]
    seen["changed"] = {n: float((p.detach().cpu() - before[n]).abs().max()) for n, p in model.named_parameters()}
    seen["param_devices"] = {n: str(p.device) for n, p in model.named_parameters()}
    seen["params"] = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
    return seen
