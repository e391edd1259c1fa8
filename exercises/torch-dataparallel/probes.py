"""Probes for torch-dataparallel: build a seeded model next to the learner's code, call make_parallel, and
report only what happened (types, devices, outputs, gradients). The hidden tests decide what is right.

The grader runs with two virtual CUDA devices (runner/vdev): torch.cuda.is_available() is True,
device_count() is 2, and nn.DataParallel's own __init__ and forward run unchanged. The hidden tests import
`Net` from here to compute the expected outputs and gradients on the CPU.
"""

import torch
from torch import nn

# Every call of Net.forward appends (device of its input, rows in its input): DataParallel runs one
# replica per GPU, so this shows how the batch was split.
CALLS: list = []


class Net(nn.Module):
    """A small model with parameters and a buffer-holding layer (BatchNorm keeps running statistics)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.hidden = nn.Linear(4, 8)
        self.norm = nn.BatchNorm1d(8)
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        CALLS.append((str(x.device), int(x.shape[0])))
        return self.head(torch.relu(self.norm(self.hidden(x))))


def batch(rows: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(rows, 4, generator=torch.Generator().manual_seed(seed))


def _moves() -> list:
    try:
        from runner.vdev import torch_cuda
    except ImportError:  # pragma: no cover - only outside the grader
        return []
    return [list(m) for m in torch_cuda.moves()]


def _reset_moves() -> None:
    try:
        from runner.vdev import torch_cuda
    except ImportError:  # pragma: no cover
        return
    torch_cuda.reset_moves()


def _describe(result, model) -> dict:
    cls = type(result)  # type(), not result.__class__, which an object can fake
    claimed = getattr(result, "__class__", cls)
    params, buffers = {}, {}
    if isinstance(result, nn.Module):
        params = {n: str(p.device) for n, p in nn.Module.named_parameters(result)}
        buffers = {n: str(b.device) for n, b in nn.Module.named_buffers(result)}
    attrs = {}
    for name in ("device_ids", "output_device"):
        try:
            value = getattr(result, name)
        except Exception as exc:  # absent or broken attribute: report it
            value = f"<{type(exc).__name__}>"
        attrs[name] = value if isinstance(value, (int, str, list, tuple, type(None))) else repr(value)
    return {
        "type": f"{cls.__module__}.{cls.__qualname__}",
        "mro": [f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__],
        "claimed_type": f"{getattr(claimed, '__module__', '?')}.{getattr(claimed, '__qualname__', repr(claimed))}",
        "is_module": isinstance(result, nn.Module),
        "is_model": result is model,
        "wraps_model": getattr(result, "module", None) is model,
        "device_ids": attrs["device_ids"],
        "output_device": attrs["output_device"],
        "param_devices": params,
        "buffer_devices": buffers,
        "model_param_devices": {n: str(p.device) for n, p in model.named_parameters()},
    }


def inspect(submission, seed: int = 0) -> dict:
    """Call make_parallel(Net(seed)) and describe what came back."""
    model = Net(seed)
    _reset_moves()
    result = submission.make_parallel(model)
    seen = _describe(result, model)
    seen["moves"] = _moves()
    return seen


def forward(submission, rows: int = 6, seed: int = 0, backward: bool = True) -> dict:
    """Call make_parallel(Net(seed)), run it on a batch placed on cuda:0, then backward on the sum."""
    model = Net(seed)
    _reset_moves()
    result = submission.make_parallel(model)
    seen = {"moves": _moves()}
    x = batch(rows).to("cuda:0")
    CALLS.clear()
    try:
        out = result(x)
    except Exception as exc:
        seen["error"] = {"type": type(exc).__name__, "message": str(exc)[:600]}
        seen["calls"] = list(CALLS)
        return seen
    seen["calls"] = list(CALLS)
    seen["error"] = None
    if not isinstance(out, torch.Tensor):
        seen["output"] = {"type": type(out).__name__}
        return seen
    seen["output"] = {
        "type": "Tensor",
        "device": str(out.device),
        "shape": list(out.shape),
        "values": out.detach().cpu().clone(),
    }
    if backward:
        try:
            out.sum().backward()
        except Exception as exc:
            seen["backward_error"] = {"type": type(exc).__name__, "message": str(exc)[:600]}
            return seen
        seen["backward_error"] = None
        seen["grads"] = {
            n: None if p.grad is None else {"device": str(p.grad.device), "value": p.grad.detach().cpu().clone()}
            for n, p in model.named_parameters()
        }
    return seen
