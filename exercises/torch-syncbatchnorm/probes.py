"""Probes for torch-syncbatchnorm: build a model with trained BatchNorm layers next to the learner's code, pass
it to their functions and report what came back, as data. Observations only; the hidden tests import
make_net, make_bn and fixed_input from here and compute the expected answers themselves.

No process group is initialised here: SyncBatchNorm needs CUDA to synchronise (see the prompt), so the tests
look at the converted model, its state and an eval-mode forward, and at the order of convert and wrap.
"""

import contextlib
import os
import traceback

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.bn(self.conv(x)))


class Net(nn.Module):
    """BatchNorm at the top level (bn), inside a custom block (block.bn) and inside a Sequential (head.2)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 3, 1)
        self.bn = nn.BatchNorm2d(3)
        self.block = Block()
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(4 * 4 * 4, 5), nn.BatchNorm1d(5))

    def forward(self, x):
        return self.head(self.block(self.bn(self.stem(x))))


class Unit(nn.Module):
    """A custom block that holds one normalisation layer."""

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x):
        return self.norm(x)


class Layout(nn.Module):
    """A BatchNorm1d and a BatchNorm3d at the top level, and each kind again inside a Sequential, a custom block,
    a ModuleList and a ModuleDict: which kinds, and which containers, does a conversion reach? Three of them have
    their own eps or momentum (momentum=None: a cumulative average), which the conversion must keep."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm1d(2, eps=1e-3, momentum=0.3)
        self.norm3 = nn.BatchNorm3d(2)
        self.seq = nn.Sequential(nn.Identity(), nn.BatchNorm3d(2, eps=0.01))
        self.unit = Unit(nn.BatchNorm1d(2))
        self.stages = nn.ModuleList([Unit(nn.BatchNorm2d(2, momentum=None))])
        self.heads = nn.ModuleDict({"out": nn.Sequential(nn.BatchNorm1d(2))})


def _train_bn(module: nn.Module) -> None:
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_()


def make_net() -> Net:
    """A seeded Net whose BatchNorm layers have non-default weights and running statistics (3 batches seen)."""
    torch.manual_seed(0)
    net = Net()
    _train_bn(net)
    net.train()
    with torch.no_grad():
        for _ in range(3):
            net(torch.randn(8, 3, 4, 4) * 2 + 1)
    return net


def make_bn() -> nn.BatchNorm1d:
    """A single BatchNorm1d(3) with non-default weights and running statistics."""
    torch.manual_seed(1)
    bn = nn.BatchNorm1d(3)
    _train_bn(bn)
    with torch.no_grad():
        bn(torch.randn(6, 3) * 3 - 1)
    return bn


def make_layout() -> Layout:
    torch.manual_seed(2)
    layout = Layout()
    _train_bn(layout)
    return layout


def frozen_block_net() -> Net:
    """make_net() in training mode with its `block` (and the BatchNorm inside it) frozen in eval mode."""
    net = make_net().train()
    net.block.eval()
    return net


def fixed_input() -> torch.Tensor:
    return torch.randn(4, 3, 4, 4, generator=torch.Generator().manual_seed(7))


def _types(module) -> dict | None:
    """Module name -> class name, each name looked up along its real path (get_submodule), so a child registered
    on the root under a dotted key ("block.bn") cannot hide the layer that really sits at model.block.bn."""
    if not isinstance(module, nn.Module):
        return None
    types = {}
    for name, _ in module.named_modules():
        try:
            found = module.get_submodule(name) if name else module
        except AttributeError:
            continue
        types.setdefault(name, type(found).__name__)
    return types


def _dotted(module) -> list[str]:
    """Children registered under a key that contains a dot (setattr(model, "block.bn", layer) makes one)."""
    if not isinstance(module, nn.Module):
        return []
    return [
        f"{owner}.{key}" if owner else key for owner, m in module.named_modules() for key in m._modules if "." in key
    ]


def _modes(module) -> dict:
    if not isinstance(module, nn.Module):
        return {}
    return {name: m.training for name, m in module.named_modules()}


def _state(module) -> dict:
    if not isinstance(module, nn.Module):
        return {}
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _name(value) -> str:
    return "None" if value is None else type(value).__name__


def convert(submission) -> dict:
    """Call convert_bn(make_net()); return the result's module types, state_dict, mode and eval-mode output."""
    out = submission.convert_bn(make_net())
    seen = {"returned": _name(out), "types": _types(out), "dotted": _dotted(out), "state": _state(out), "output": None}
    if isinstance(out, nn.Module):
        seen["training"] = out.training
        out.eval()
        with torch.no_grad():
            seen["output"] = out(fixed_input())
    return seen


def convert_layout(submission) -> dict:
    """Call convert_bn(make_layout()); return the result's module types (every kind, in every container)."""
    out = submission.convert_bn(make_layout())
    return {"returned": _name(out), "types": _types(out), "dotted": _dotted(out), "settings": settings(out)}


def settings(module) -> dict:
    """For every BatchNorm-like layer (SyncBatchNorm included): its eps, momentum, affine and track_running_stats."""
    if not isinstance(module, nn.Module):
        return {}
    return {
        name: {key: getattr(m, key) for key in ("eps", "momentum", "affine", "track_running_stats")}
        for name, m in module.named_modules()
        if isinstance(m, nn.modules.batchnorm._BatchNorm)
    }


def convert_modes(submission) -> dict:
    """Call convert_bn on a model in eval mode and on one whose `block` alone is in eval mode (a frozen block);
    return every module's training flag afterwards."""
    seen = {}
    for case, net in (("eval", make_net().eval()), ("mixed", frozen_block_net())):
        out = submission.convert_bn(net)
        seen[case] = {"returned": _name(out), "modes": _modes(out), "types": _types(out)}
    return seen


@contextlib.contextmanager
def _spying_on_convert_sync_batchnorm():
    """Record (module, result) of every nn.SyncBatchNorm.convert_sync_batchnorm call while the block runs."""
    calls: list = []
    original = nn.SyncBatchNorm.__dict__["convert_sync_batchnorm"]

    def spy(cls, module, *args, **kwargs):
        out = original.__func__(cls, module, *args, **kwargs)
        calls.append((module, out))
        return out

    nn.SyncBatchNorm.convert_sync_batchnorm = classmethod(spy)
    try:
        yield calls
    finally:
        nn.SyncBatchNorm.convert_sync_batchnorm = original


def convert_single(submission) -> dict:
    """Call convert_bn on a bare BatchNorm1d layer; return the result's type and state, whether it is the layer
    given, and whether convert_sync_batchnorm was called on that very layer. Also the type convert_bn returns for a
    bare BatchNorm2d (is the 1d kind the problem, or a bare layer?)."""
    bn = make_bn()
    with _spying_on_convert_sync_batchnorm() as calls:
        out = submission.convert_bn(bn)
    seen = {
        "returned": _name(out),
        "state": _state(out),
        "is_input": out is bn,
        "sync_called_on_input": any(module is bn and isinstance(result, nn.SyncBatchNorm) for module, result in calls),
    }
    try:
        seen["bare2d"] = _name(submission.convert_bn(nn.BatchNorm2d(3)))
    except Exception:
        seen["bare2d"] = None
    return seen


class Wrapper(nn.Module):
    """Stands in for DistributedDataParallel: keeps the model as .module."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


def _raised_in_ddp(exc: BaseException) -> bool:
    """Whether the exception came out of DistributedDataParallel's constructor."""
    ddp_file = os.path.join("nn", "parallel", "distributed.py")
    return any(
        frame.f_code.co_name == "__init__" and frame.f_code.co_filename.endswith(ddp_file)
        for frame, _ in traceback.walk_tb(exc.__traceback__)
    )


def _learner_line(exc: BaseException, submission) -> int | None:
    path = getattr(submission, "__file__", None)
    line = None
    for frame, lineno in traceback.walk_tb(exc.__traceback__):
        if path and frame.f_code.co_filename == path:
            line = lineno
    return line


def prepare(submission) -> dict:
    """Call prepare(make_net(), wrap) with a recording wrap; report what the model looked like when wrapped, which
    object wrap got (the model prepare was given? what convert_bn returned?), what prepare returned, and an
    exception as data (with whether it came out of a DistributedDataParallel the code built itself). Under "bare",
    the same for prepare(bn, wrap) with bn a bare BatchNorm1d, where convert_bn's result is a new object."""
    seen = _prepare(submission, make_net())
    bare = _prepare(submission, make_bn())
    seen["bare"] = {
        key: bare[key]
        for key in ("error", "calls", "wrapped_type", "wrapped_given", "convert_calls", "wrapped_converted",
                    "converted_types")
    }
    return seen


def _prepare(submission, given: nn.Module) -> dict:
    calls = []
    converted = []

    def wrap(model):
        w = Wrapper(model)
        calls.append({"model": model, "types": _types(model), "wrapper": w})
        return w

    convert_bn = getattr(submission, "convert_bn", None)

    def spy(*args, **kwargs):
        out = convert_bn(*args, **kwargs)
        converted.append(out)
        return out

    if callable(convert_bn):
        submission.convert_bn = spy  # prepare looks convert_bn up in its module when it calls it
    error, out = None, None
    try:
        out = submission.prepare(given, wrap)
    except Exception as exc:
        error = {"type": type(exc).__name__, "message": str(exc), "line": _learner_line(exc, submission),
                 "in_ddp": _raised_in_ddp(exc)}
    finally:
        if callable(convert_bn):
            submission.convert_bn = convert_bn
    wrapped = calls[0]["model"] if calls else None
    return {
        "error": error,
        "calls": len(calls),
        "types_at_wrap": calls[0]["types"] if calls else None,
        "wrapped_given": calls != [] and wrapped is given,
        "convert_calls": len(converted),
        "wrapped_converted": calls != [] and any(wrapped is c for c in converted),
        "wrapped_type": _name(wrapped) if calls else None,
        "converted_types": [_name(c) for c in converted],
        "returned": _name(out),
        "returned_wrapper": bool(calls) and out is calls[-1]["wrapper"],
        "returned_wrapped_model": bool(calls) and out is wrapped,
        "types_after": _types(out.module) if isinstance(out, Wrapper) else None,
    }
