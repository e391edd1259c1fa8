"""Probes for torch-allreduce-grads: run the learner's code in real rank processes (runner.vdev.ddp, gloo on the
CPU) and report what came back, as data. Observations only; the hidden tests compute what is right.

- run_average: every rank builds grad_model(), fills its gradients with rank-dependent values, calls the
  learner's average_gradients(model, world_size) and returns the gradients afterwards.
- run_train: runs the learner's train(rank, world_size) and returns its state_dict plus how many
  DistributedDataParallel objects were constructed in the rank.
The hidden tests import make_data, make_model and rank_grad from here to compute their references.
"""

from collections.abc import Mapping

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

# Warm the subject before it forks per-test children, so ranks start in ~0.1 s instead of seconds.
import torch._dynamo  # noqa: E402,F401

torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)

PREFIX = "__probe__."


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    """The 64 samples of the prompt."""
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    return x, x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5


def make_model() -> nn.Module:
    """The prompt's model, seeded as the prompt says."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def grad_model() -> nn.Module:
    """A small model for run_average: three layers; the last layer's bias is frozen (its .grad stays None)."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    model[4].bias.requires_grad_(False)
    return model


def rank_grad(rank: int, index: int, shape) -> torch.Tensor:
    """The gradient rank `rank` holds for its `index`-th trainable parameter before averaging."""
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(n, dtype=torch.float32).reshape(shape) * (rank + 1) + 10.0 * index * rank).contiguous()


_seen = {"ddp": 0}


def _instrument() -> None:
    original = DistributedDataParallel.__init__
    if getattr(original, "_gpulab_probe", False):
        return

    def init(self, *args, **kwargs):
        _seen["ddp"] += 1
        return original(self, *args, **kwargs)

    init._gpulab_probe = True
    DistributedDataParallel.__init__ = init


def run_average(submission, world_size: int = 2, timeout_s: float = 40.0) -> list:
    """Each rank: init gloo, set rank-dependent grads, call average_gradients, return the grads afterwards."""
    from runner.vdev import ddp

    def rank_fn(rank: int, ws: int):
        dist.init_process_group("gloo", rank=rank, world_size=ws)
        model = grad_model()
        trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        for i, (_, p) in enumerate(trainable):
            p.grad = rank_grad(rank, i, tuple(p.shape))
        result = submission.average_gradients(model, ws)
        out = {}
        for name, p in model.named_parameters():
            if p.grad is not None:
                out[name] = p.grad.detach().clone()
        out[PREFIX + "returned_none"] = torch.tensor(result is None)
        dist.destroy_process_group()
        return out

    return [r.plain() for r in ddp.run(rank_fn, world_size=world_size, timeout_s=timeout_s)]


def run_train(submission, world_size: int = 2, timeout_s: float = 40.0) -> list:
    """Run submission.train on world_size ranks; return each rank's RankResult.plain() with observations."""
    from runner.vdev import ddp

    _instrument()

    def rank_fn(rank: int, ws: int):
        state = submission.train(rank, ws)
        if not isinstance(state, Mapping):
            return state  # the harness reports the wrong type
        return {**dict(state), PREFIX + "ddp": torch.tensor(_seen["ddp"])}

    return [r.plain() for r in ddp.run(rank_fn, world_size=world_size, timeout_s=timeout_s)]
