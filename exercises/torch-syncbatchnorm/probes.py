"""Probes for torch-syncbatchnorm: build a model with trained BatchNorm layers next to the learner's code, pass
it to their functions and report what came back, as data. Observations only; the hidden tests import
make_net, make_bn and fixed_input from here and compute the expected answers themselves.

No process group is initialised here: SyncBatchNorm needs CUDA to synchronise (see the prompt), so the tests
look at the converted model, its state and an eval-mode forward, and at the order of convert and wrap.
"""

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


def fixed_input() -> torch.Tensor:
    return torch.randn(4, 3, 4, 4, generator=torch.Generator().manual_seed(7))


def _types(module) -> dict | None:
    if not isinstance(module, nn.Module):
        return None
    return {name: type(m).__name__ for name, m in module.named_modules()}


def _state(module) -> dict:
    if not isinstance(module, nn.Module):
        return {}
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def convert(submission) -> dict:
    """Call convert_bn(make_net()); return the result's module types, state_dict, mode and eval-mode output."""
    out = submission.convert_bn(make_net())
    seen = {"returned": type(out).__name__, "types": _types(out), "state": _state(out), "output": None}
    if isinstance(out, nn.Module):
        seen["training"] = out.training
        out.eval()
        with torch.no_grad():
            seen["output"] = out(fixed_input())
    return seen


def convert_single(submission) -> dict:
    """Call convert_bn on a bare BatchNorm1d layer; return the result's type and state."""
    bn = make_bn()
    out = submission.convert_bn(bn)
    return {"returned": type(out).__name__, "state": _state(out), "is_input": out is bn}


class Wrapper(nn.Module):
    """Stands in for DistributedDataParallel: keeps the model as .module."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)


def prepare(submission) -> dict:
    """Call prepare(make_net(), wrap) with a recording wrap; report what the model looked like when wrapped."""
    calls = []

    def wrap(model):
        w = Wrapper(model)
        calls.append({"types": _types(model), "wrapper": w})
        return w

    out = submission.prepare(make_net(), wrap)
    return {
        "calls": len(calls),
        "types_at_wrap": calls[0]["types"] if calls else None,
        "returned": type(out).__name__,
        "returned_wrapper": bool(calls) and out is calls[-1]["wrapper"],
        "types_after": _types(out.module) if isinstance(out, Wrapper) else None,
    }
