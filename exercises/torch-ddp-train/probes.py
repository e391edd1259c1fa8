"""Probes for torch-ddp-train: run the learner's train(rank, world_size) in real processes with real DDP over
gloo (runner.vdev.ddp) and report what each rank returned, plus what it did, as data.

Observations (forgeable by a learner who patches this file, like every probe; the tests also check results
that cannot be forged without training correctly):
- the rows of every batch that went through DistributedDataParallel.forward, in order (first 512 rows);
- how many DDP forwards ran, and which backend the process group used.
The hidden tests import `dataset` from here to know the data.
"""

from collections.abc import Mapping

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

# Warm the subject before it forks per-test children, so ranks start in ~0.1 s instead of seconds.
import torch._dynamo  # noqa: E402,F401

torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)

TRUE_W = torch.tensor([[1.0, -2.0, 0.5, 3.0]])
TRUE_B = 0.5
MAX_ROWS = 512
PREFIX = "__probe__."


def dataset() -> tuple[torch.Tensor, torch.Tensor]:
    """The 64 samples of the prompt: x ~ N(0, 1) from seed 1234, y = x @ [1, -2, 0.5, 3] + 0.5."""
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    return x, x @ TRUE_W.T + TRUE_B


_seen: dict = {"rows": [], "forwards": 0, "backend": ""}


def _instrument() -> None:
    original = DistributedDataParallel.forward
    if getattr(original, "_gpulab_probe", False):
        return

    def forward(self, *inputs, **kwargs):
        _seen["forwards"] += 1
        if not _seen["backend"]:
            try:
                _seen["backend"] = str(dist.get_backend(self.process_group))
            except Exception:
                _seen["backend"] = "?"
        first = inputs[0] if inputs else next(iter(kwargs.values()), None)
        if isinstance(first, torch.Tensor) and first.dim() == 2 and sum(len(r) for r in _seen["rows"]) < MAX_ROWS:
            _seen["rows"].append(first.detach().cpu().float().clone())
        return original(self, *inputs, **kwargs)

    forward._gpulab_probe = True
    DistributedDataParallel.forward = forward


def run(submission, world_size: int = 2, timeout_s: float = 40.0) -> list:
    """Run submission.train on world_size ranks; return each rank's RankResult.plain() with observations."""
    from runner.vdev import ddp

    _instrument()

    def train(rank: int, ws: int):
        state = submission.train(rank, ws)
        if not isinstance(state, Mapping):
            return state  # the harness reports the wrong type
        rows = torch.cat(_seen["rows"])[:MAX_ROWS] if _seen["rows"] else torch.zeros(0, 4)
        extra = {
            PREFIX + "rows": rows,
            PREFIX + "forwards": torch.tensor(_seen["forwards"]),
            PREFIX + "backend": torch.tensor(list(_seen["backend"].encode()) or [0], dtype=torch.uint8),
        }
        return {**dict(state), **extra}

    return [r.plain() for r in ddp.run(train, world_size=world_size, timeout_s=timeout_s)]
