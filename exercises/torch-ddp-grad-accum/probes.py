"""Probes for torch-ddp-grad-accum: run the learner's train(rank, world_size) in real processes with real DDP over
gloo (runner.vdev.ddp) and measure each rank's communication (runner.vdev.comm): collective calls and payload
bytes per optimizer step, optimizer steps, samples through the DDP model, compute time per step; and, per forward
pass of the DDP-wrapped model, whether gradient sync was on (outside no_sync) and whether it went through the
wrapper at all, so the tests can name which micro-batches synced.

The measurements are observations a learner who patches this file could forge, like every probe's; the final
weights, which the tests compare with a one-process reference, cannot be forged without training correctly.
The hidden tests import the data, the model and the constants from here; MICRO and ACCUM are the learner's
variant (exercise.toml [params]), which the tests read from their params fixture.
"""

from collections.abc import Mapping

import torch

# Warm the subject before it forks per-test children, so ranks start in ~0.1 s instead of seconds.
import torch._dynamo
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: F401

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


# What the probe observes in each rank, sent back beside the learner's weights (tensors only cross the rank's pipe)
# and taken out again before the tests see the state: one row per forward pass of the DDP-wrapped model.
FORWARDS = "__gpulab_forwards__"  # [optimizer steps before it, gradient sync on, through the DDP wrapper, rows]
NO_SYNC = "__gpulab_no_sync__"  # how many times model.no_sync() was entered
MAX_FORWARDS = 4096


def _watch() -> dict:
    """Start observing this rank's DDP forwards, no_sync() entries and optimizer steps; return the record.

    Runs inside the rank (a forked process), so the patches end with it. A forward through the wrapper records
    whether gradient sync was on (``require_backward_grad_sync``, which ``no_sync()`` turns off and DDP reads at
    forward time); a forward of the wrapped module itself, outside the wrapper's forward, records that it
    bypassed DDP.
    """
    from torch.nn.parallel import DistributedDataParallel
    from torch.optim.optimizer import register_optimizer_step_post_hook

    seen: dict = {"steps": 0, "forwards": [], "no_sync": 0, "inside": 0}

    def rows(args) -> int:
        first = args[0] if args else None
        return int(first.shape[0]) if isinstance(first, torch.Tensor) and first.dim() > 0 else 0

    def note(synced: bool, through_ddp: bool, n: int) -> None:
        if len(seen["forwards"]) < MAX_FORWARDS:
            seen["forwards"].append([seen["steps"], int(synced), int(through_ddp), n])

    def stepped(*_args) -> None:
        seen["steps"] += 1

    register_optimizer_step_post_hook(stepped)
    forward, no_sync, init = (
        DistributedDataParallel.forward,
        DistributedDataParallel.no_sync,
        DistributedDataParallel.__init__,
    )

    def watched_forward(self, *args, **kwargs):
        note(bool(self.require_backward_grad_sync), True, rows(args))
        seen["inside"] += 1
        try:
            return forward(self, *args, **kwargs)
        finally:
            seen["inside"] -= 1

    def watched_no_sync(self):
        seen["no_sync"] += 1
        return no_sync(self)

    def watched_init(self, module, *args, **kwargs):
        init(self, module, *args, **kwargs)

        def bypass(_module, args) -> None:
            if not seen["inside"]:
                note(False, False, rows(args))

        module.register_forward_pre_hook(bypass)

    DistributedDataParallel.forward = watched_forward
    DistributedDataParallel.no_sync = watched_no_sync
    DistributedDataParallel.__init__ = watched_init
    return seen


def run(submission, world_size: int = 2, timeout_s: float = 40.0) -> list:
    """Run submission.train on world_size ranks, measuring; return each rank's RankResult.plain().

    Each result also holds ``forwards`` (one ``[steps before it, sync on, through DDP, rows]`` per forward of the
    DDP-wrapped model) and ``no_sync`` (how often ``model.no_sync()`` was entered); both ``None`` when the rank
    returned no state.
    """
    from runner.vdev import ddp

    def train(rank: int, ws: int):
        seen = _watch()
        state = submission.train(rank, ws)
        if not isinstance(state, Mapping):
            return state
        state = dict(state)
        state[FORWARDS] = torch.tensor(seen["forwards"] or [[0, 0, 0, 0]], dtype=torch.int64)[: len(seen["forwards"])]
        state[NO_SYNC] = torch.tensor([seen["no_sync"]], dtype=torch.int64)
        return state

    runs = [r.plain() for r in ddp.run(train, world_size=world_size, timeout_s=timeout_s, measure=True)]
    for r in runs:
        forwards, entered = r["state"].pop(FORWARDS, None), r["state"].pop(NO_SYNC, None)
        r["forwards"] = (
            None if forwards is None else [forwards["data"][i : i + 4] for i in range(0, len(forwards["data"]), 4)]
        )
        r["no_sync"] = None if entered is None else int(entered["data"][0])
    return runs
