"""Probes for torch-ddp-bf16-autocast: run the learner's train(rank, world_size) in real processes with real DDP
over gloo (runner.vdev.ddp, communication measured by runner.vdev.comm) and observe its precision in every rank:

- every autocast region entered: device type, dtype, and whether it is enabled (torch.autocast("cuda") on a machine
  without CUDA warns and disables itself);
- every nn.Linear forward: whether CPU autocast was on, the dtypes of its output and its weight;
- every backward: the dtype of the tensor it starts from (the loss);
- every optimizer step: the dtypes of the parameters and their gradients, and how many entries with a non-zero
  gradient kept exactly their value through the step (an update rounded away);
- the dtypes of the returned state_dict, which travels as float32 (bfloat16 cannot cross the pipe).

Observations are forgeable by a learner who patches this file, like every probe's; the final weights, which the
tests compare with a one-process reference, cannot be forged without training as asked. The hidden tests import
the data, the model and the constants from here.
"""

import json
from collections import Counter
from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

# Warm the subject before it forks per-test children, so ranks start in ~0.1 s instead of seconds.
import torch._dynamo  # noqa: E402,F401
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: E402,F401

torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)

# The prompt's and the starter's settings.
N_SAMPLES, FEATURES, CLASSES, BATCH, EPOCHS, LR = 512, 16, 4, 32, 3, 0.01
PREFIX = "__probe__."
PARAMS = FEATURES * 64 + 64 + 64 * CLASSES + CLASSES  # 1348


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    """The starter's 512 samples: four Gaussian clusters in 16 dimensions, from seed 7."""
    g = torch.Generator().manual_seed(7)
    centers = torch.randn(CLASSES, FEATURES, generator=g) * 1.2
    y = torch.randint(0, CLASSES, (N_SAMPLES,), generator=g)
    return centers[y] + torch.randn(N_SAMPLES, FEATURES, generator=g), y


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))


def loader(rank: int, world_size: int) -> DataLoader:
    dataset = TensorDataset(*make_data())
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    return DataLoader(dataset, batch_size=BATCH, sampler=sampler)


_seen: dict = {}


def _reset() -> None:
    _seen.clear()
    _seen.update(
        autocast=Counter(),
        linear=Counter(),
        backward=Counter(),
        steps=0,
        param_dtypes=Counter(),
        grad_dtypes=Counter(),
        updates=0,
        unchanged=0,
        before=[],
    )


def _install() -> None:
    """Observe autocast regions, Linear forwards, backwards and optimizer steps in this (rank) process."""
    from torch.amp.autocast_mode import autocast
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    enter = autocast.__enter__

    def observed_enter(self):
        _seen["autocast"][f"{self.device}|{self.fast_dtype}|{bool(self._enabled)}"] += 1
        return enter(self)

    autocast.__enter__ = observed_enter

    def on_forward(module, args, output):
        if isinstance(module, nn.Linear) and isinstance(output, torch.Tensor) and torch.is_grad_enabled():
            on = torch.is_autocast_enabled("cpu")
            _seen["linear"][f"{on}|{torch.get_autocast_dtype('cpu') if on else None}|{output.dtype}|{module.weight.dtype}"] += 1

    nn.modules.module.register_module_forward_hook(on_forward)

    backward = torch.autograd.backward

    def observed_backward(tensors, *args, **kwargs):
        first = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
        if isinstance(first, torch.Tensor):
            _seen["backward"][str(first.dtype)] += 1
        return backward(tensors, *args, **kwargs)

    torch.autograd.backward = observed_backward

    def before_step(optimizer, args, kwargs):
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        _seen["before"] = [(p, p.detach().clone(), p.grad.detach() != 0) for p in params]
        for p in params:
            _seen["param_dtypes"][str(p.dtype)] += 1
            _seen["grad_dtypes"][str(p.grad.dtype)] += 1

    def after_step(optimizer, args, kwargs):
        _seen["steps"] += 1
        for p, old, moved in _seen["before"]:
            _seen["updates"] += int(moved.sum())
            _seen["unchanged"] += int(((p.detach() == old) & moved).sum())
        _seen["before"] = []

    register_optimizer_step_pre_hook(before_step)
    register_optimizer_step_post_hook(after_step)


def _encoded(data: dict) -> torch.Tensor:
    return torch.tensor(list(json.dumps(data).encode()), dtype=torch.uint8)


def run(submission, world_size: int = 2, timeout_s: float = 40.0) -> list:
    """Run submission.train on world_size ranks, measuring; return each rank's RankResult.plain() with observations."""
    from runner.vdev import ddp

    def train(rank: int, ws: int):
        _reset()
        _install()
        state = submission.train(rank, ws)
        if not isinstance(state, Mapping):
            return state  # the harness reports the wrong type
        tensors = {str(k): v for k, v in state.items() if isinstance(v, torch.Tensor)}
        seen = {
            "autocast": dict(_seen["autocast"]),
            "linear": dict(_seen["linear"]),
            "backward": dict(_seen["backward"]),
            "steps": _seen["steps"],
            "param_dtypes": dict(_seen["param_dtypes"]),
            "grad_dtypes": dict(_seen["grad_dtypes"]),
            "updates": _seen["updates"],
            "unchanged": _seen["unchanged"],
            "state_dtypes": {k: str(v.dtype) for k, v in tensors.items()},
        }
        out = {k: v.detach().float() if v.is_floating_point() else v for k, v in tensors.items()}
        return {**out, PREFIX + "seen": _encoded(seen)}

    return [r.plain() for r in ddp.run(train, world_size=world_size, timeout_s=timeout_s, measure=True)]


def simulate(mode: str = "right") -> dict[str, torch.Tensor]:
    """Return the weights after the prompt's training on 2 ranks, simulated in one process, one rank after the other.

    mode: "right" (forward and loss under bf16 autocast, float32 weights), "fp32" (no autocast), "loss_bf16" (the
    loss computed outside autocast on the bf16 logits), "cast" (the model cast to bf16, forward and loss under
    autocast). Each rank's gradient is computed on its own batch, as DDP does, and the two are averaged. Imported
    by the hidden tests (it runs in the judge, not next to the learner's code).
    """
    import contextlib

    world = 2
    x, y = make_data()
    model = build_model()
    if mode == "cast":
        model = model.to(torch.bfloat16)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    shards = [list(range(r, N_SAMPLES, world)) for r in range(world)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in every rank: the same kernels, the same rounding
    try:
        for _ in range(EPOCHS):
            for start in range(0, N_SAMPLES // world, BATCH):
                grads = None
                for shard in shards:
                    rows = shard[start : start + BATCH]
                    model.zero_grad()
                    region = contextlib.nullcontext() if mode == "fp32" else torch.autocast("cpu", dtype=torch.bfloat16)
                    with region:
                        logits = model(x[rows])
                        loss = F.cross_entropy(logits, y[rows]) if mode != "loss_bf16" else None
                    if loss is None:
                        loss = F.cross_entropy(logits, y[rows])
                    loss.backward()
                    mine = [p.grad / world for p in model.parameters()]
                    grads = mine if grads is None else [a + b for a, b in zip(grads, mine, strict=True)]
                for p, g in zip(model.parameters(), grads, strict=True):
                    p.grad = g
                optimizer.step()
    finally:
        torch.set_num_threads(threads)
    return {k: v.detach().float() for k, v in model.state_dict().items()}
