"""Probes for torch-comm-budget-capstone: run the learner's train in two real processes with real DDP over gloo
(runner.vdev.ddp) and measure each rank's communication (runner.vdev.comm: every collective's calls, payload bytes
and dtypes per optimizer step, and the samples that went through DDP's forward).

The weights come back as raw bytes (``_plain``); the hidden tests compute the accuracy from them, which cannot be
forged without training. The measurements are observations a learner who patches this file could forge (see
worker/runner/README.md, Limits). The hidden tests import the data, the model and the constants from here.
"""

import torch
from torch import nn

# The prompt's and the starter's settings.
N_TRAIN, N_VAL, MICRO, EPOCHS, LR = 512, 256, 16, 8, 3e-3
W_PER_KW = 1000.0
BUDGET = 2_179_088


def make_dataset() -> tuple[torch.Tensor, torch.Tensor]:
    """The starter's 768 samples: 16 readings x ~ N(0, 1), y in watts within about 3 kW of a baseline."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(N_TRAIN + N_VAL, 16, generator=g)
    w = torch.randn(16, 1, generator=g) / 4
    return x, 3000 * torch.tanh(x @ w) + 50 * torch.randn(N_TRAIN + N_VAL, 1, generator=g)


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(16, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 1)
    )


def _plain(rank_result) -> dict:
    """Return a rank's result as data, its weights as raw little-endian bytes (with ``dtype`` and ``shape``).

    Raw bytes, not lists of numbers: build_model()'s 136,193 float32 values on two ranks would not fit in one
    reply as JSON numbers.
    """
    result = rank_result.plain()
    result["state"] = {
        k: {"dtype": str(v.dtype), "shape": list(v.shape), "bytes": v.astype(v.dtype.newbyteorder("<")).tobytes()}
        for k, v in rank_result.state.items()
    }
    return result


def _warm() -> None:
    """Import what DDP's first forward, the hooks and the optimizer import lazily, before the ranks fork (they then
    start in ~0.1 s instead of paying seconds each). Done here, not at import: the judge imports this file too."""
    import torch._dynamo
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook  # noqa: F401

    torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=0.1)


def run(submission, world_size: int = 2, timeout_s: float = 40.0) -> list:
    """Run submission.train on world_size ranks, measuring; return each rank's result as data."""
    from runner.vdev import ddp

    _warm()
    return [_plain(r) for r in ddp.run(submission.train, world_size=world_size, timeout_s=timeout_s, measure=True)]
