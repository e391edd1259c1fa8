"""Probes for torch-dataparallel: build a seeded model next to the learner's code, call make_parallel, and
report only what happened (types, devices, outputs, gradients). The hidden tests decide what is right.

The grader runs with two virtual CUDA devices (runner/vdev): torch.cuda.is_available() is True,
device_count() is 2, and nn.DataParallel's own __init__ and forward run unchanged. The hidden tests import
`Net` from here to compute the expected outputs and gradients on the CPU.
"""

import inspect as inspect_module
import re

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


# What the learner's make_parallel built while it ran: one entry per nn.DataParallel or DistributedDataParallel
# constructor call (the class, the arguments given, whether the constructor raised). Kept until the next
# make_parallel call of this test's process, so a test can ask for it after make_parallel raised.
BUILT: list = []


def _shown(value) -> str:
    """A constructor argument as a learner would write it (short)."""
    if isinstance(value, torch.device):
        return f"torch.device('{value}')"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_shown(v) for v in list(value)[:8])
        return f"[{inner}]" if isinstance(value, list) else f"({inner}{',' if len(value) == 1 else ''})"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _indices(value) -> list | None:
    """device_ids as GPU indices (ints, or torch.device('cuda', i)), or None when it is not such a list."""
    if not isinstance(value, (list, tuple, range)):
        return None
    out = []
    for v in value:
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            out.append(v)
        elif isinstance(v, torch.device) and v.type == "cuda" and v.index is not None:
            out.append(v.index)
        else:
            return None
    return out


def _recording(cls, label: str):
    """Wrap cls.__init__ so that each call is appended to BUILT; return a function that undoes it."""
    original = cls.__dict__["__init__"]
    signature = inspect_module.signature(original)

    def __init__(self, *args, **kwargs):
        entry = {"class": label, "args": {}, "arg_types": {}, "raised": None}
        try:
            bound = signature.bind(self, *args, **kwargs)
            for name in ("device_ids", "output_device", "dim"):
                if name in bound.arguments:
                    entry["args"][name] = _shown(bound.arguments[name])
                    entry["arg_types"][name] = type(bound.arguments[name]).__name__
            entry["ids"] = _indices(bound.arguments.get("device_ids"))
        except TypeError:
            pass
        entry["gpus"] = torch.cuda.device_count()
        BUILT.append(entry)
        try:
            original(self, *args, **kwargs)
        except Exception as exc:
            entry["raised"] = {"type": type(exc).__name__, "message": str(exc)[:600]}
            raise

    __init__.__wrapped__ = original
    cls.__init__ = __init__

    def undo() -> None:
        cls.__init__ = original

    return undo


def _make(submission, model):
    """Call the learner's make_parallel(model), recording the wrappers it constructs."""
    BUILT.clear()
    undo = [_recording(nn.DataParallel, "DataParallel")]
    from torch.nn.parallel import DistributedDataParallel

    undo.append(_recording(DistributedDataParallel, "DistributedDataParallel"))
    try:
        return submission.make_parallel(model)
    finally:
        for step in reversed(undo):
            step()


def built(submission) -> list:
    """What the last make_parallel call of this test constructed (see BUILT)."""
    return list(BUILT)


def _own_forward(cls) -> str | None:
    """The subclass of nn.DataParallel whose own forward replaces DataParallel's, or None."""
    if not issubclass(cls, nn.DataParallel):
        return None
    for c in cls.__mro__:
        if c is nn.DataParallel:
            return None
        if "forward" in c.__dict__:
            return c.__qualname__
    return None


def _describe(result, model) -> dict:
    cls = type(result)  # type(), not result.__class__, which an object can fake
    claimed = getattr(result, "__class__", cls)
    params, buffers, dtypes, contains, not_training = {}, {}, {}, False, []
    if isinstance(result, nn.Module):
        params = {n: str(p.device) for n, p in nn.Module.named_parameters(result)}
        buffers = {n: str(b.device) for n, b in nn.Module.named_buffers(result)}
        dtypes = {n: str(p.dtype).removeprefix("torch.") for n, p in nn.Module.named_parameters(result)}
        contains = any(m is model for m in nn.Module.modules(result))
    not_training = [n or "the model" for n, m in model.named_modules() if not m.training]
    attrs = {}
    for name in ("device_ids", "output_device", "dim"):
        try:
            value = getattr(result, name)
        except Exception as exc:  # absent or broken attribute: report it
            value = f"<{type(exc).__name__}>"
        attrs[name] = value if isinstance(value, (int, str, list, tuple, type(None))) else repr(value)
    inner = getattr(result, "module", None) if isinstance(result, nn.Module) else None
    return {
        "type": f"{cls.__module__}.{cls.__qualname__}",
        "name": cls.__qualname__,
        "mro": [f"{c.__module__}.{c.__qualname__}" for c in cls.__mro__],
        "claimed_type": f"{getattr(claimed, '__module__', '?')}.{getattr(claimed, '__qualname__', repr(claimed))}",
        "is_module": isinstance(result, nn.Module),
        "is_model": result is model,
        "wraps_model": getattr(result, "module", None) is model,
        "contains_model": contains,
        "device_ids": attrs["device_ids"],
        "output_device": attrs["output_device"],
        "dim": attrs["dim"],
        "param_devices": params,
        "buffer_devices": buffers,
        "param_dtypes": dtypes,
        "not_training": not_training,
        "model_param_devices": {n: str(p.device) for n, p in model.named_parameters()},
        "built": list(BUILT),
        "inner_type": None if inner is None else f"{type(inner).__module__}.{type(inner).__qualname__}",
        # A DataParallel subclass with a forward of its own (DataParallel.forward scatters the batch).
        "own_forward": _own_forward(cls),
        # The model that was given, as make_parallel left it: its layers' types and its parameters' and
        # buffers' values (moved back to the CPU); the tests compare them with a fresh Net(seed).
        "model_layers": {n: type(m).__qualname__ for n, m in model.named_modules() if n},
        "model_values": {n: t.detach().cpu().clone() for n, t in [*model.named_parameters(), *model.named_buffers()]},
    }


def _replica_error(message: str) -> dict | None:
    """DataParallel re-raises a replica's exception as "Caught T in replica i on device d.\nOriginal Traceback
    ...": return the original exception's type and text (the traceback's last, unindented lines)."""
    head = re.match(r"Caught (\w+) in replica (\d+) on device (\d+)\.", message)
    if head is None:
        return None
    lines = message.split("\n")
    frames = [i for i, line in enumerate(lines) if line.startswith("  File ")]
    after = frames[-1] if frames else 0
    start = next((i for i in range(after + 1, len(lines)) if lines[i] and not lines[i][0].isspace()), None)
    if start is None:
        return {"type": head[1], "message": "", "replica": int(head[2]), "device": int(head[3])}
    text = "\n".join(lines[start:]).strip()
    kind, _, rest = text.partition(": ")
    return {"type": kind.rsplit(".", 1)[-1], "message": rest, "replica": int(head[2]), "device": int(head[3])}


def inspect(submission, seed: int = 0) -> dict:
    """Call make_parallel(Net(seed)) and describe what came back."""
    model = Net(seed)
    _reset_moves()
    result = _make(submission, model)
    moves = _moves()  # before _describe, whose copies to the CPU are no moves of the learner's
    seen = _describe(result, model)
    seen["moves"] = moves
    return seen


def forward(submission, rows: int = 6, seed: int = 0, backward: bool = True) -> dict:
    """Call make_parallel(Net(seed)), run it on a batch placed on cuda:0, then backward on the sum."""
    model = Net(seed)
    _reset_moves()
    result = _make(submission, model)
    seen = {"moves": _moves(), "described": _describe(result, model)}
    x = batch(rows).to("cuda:0")
    CALLS.clear()
    try:
        out = result(x)
    except Exception as exc:
        text = str(exc)
        seen["error"] = {"type": type(exc).__name__, "message": text[:600], "replica": _replica_error(text)}
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
        "dtype": str(out.dtype).removeprefix("torch."),
        "values": out.detach().cpu().float().clone(),
    }
    if backward:
        try:
            out.sum().backward()
        except Exception as exc:
            seen["backward_error"] = {"type": type(exc).__name__, "message": str(exc)[:600]}
            return seen
        seen["backward_error"] = None
        seen["grads"] = {
            n: None if p.grad is None else {"device": str(p.grad.device), "value": p.grad.detach().cpu().float()}
            for n, p in model.named_parameters()
        }
    return seen
