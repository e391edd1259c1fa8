"""Probes for torch-ddp-grad-accum: run the learner's train(rank, world_size) in real processes with real DDP over
gloo (runner.vdev.ddp) and measure each rank's communication (runner.vdev.comm): collective calls and payload
bytes per optimizer step, optimizer steps, samples through the DDP model, compute time per step.

The measurements are observations a learner who patches this file could forge, like every probe's; the final
weights, which the tests compare with a one-process reference, cannot be forged without training correctly.
The hidden tests import the data, the model and the constants from here; MICRO and ACCUM are the learner's
variant (exercise.toml [params]), which the tests read from their params fixture.
"""

from collections.abc import Mapping

import torch
from torch import nn

# Warm the subject before it forks per-test children, so ranks start in ~0.1 s instead of seconds.
import torch._dynamo  # noqa: E402,F401
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: E402,F401

torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)

# The prompt's and the starter's settings that every variant shares.
N_SAMPLES, EPOCHS, LR = 88, 2, 0.1
PARAM_BYTES = (4 * 8 + 8 + 8 * 1 + 1) * 4  # build_model()'s 49 float32 parameters: one DDP bucket


def make_dataset() -> tuple[torch.Tensor, torch.Tensor]:
    """The starter's 88 samples: x ~ N(0, 1) from seed 1234, y = sin(x @ w) plus a little noise."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(N_SAMPLES, 4, generator=g)
    w = torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    return x, torch.sin(x @ w) + 0.1 * torch.randn(N_SAMPLES, 1, generator=g)


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def run(submission, world_size: int = 2, timeout_s: float = 40.0) -> list:
    """Run submission.train on world_size ranks, measuring; return each rank's RankResult.plain()."""
    from runner.vdev import ddp

    def train(rank: int, ws: int):
        state = submission.train(rank, ws)
        return dict(state) if isinstance(state, Mapping) else state

    return [r.plain() for r in ddp.run(train, world_size=world_size, timeout_s=timeout_s, measure=True)]
