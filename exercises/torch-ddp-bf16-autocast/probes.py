"""Probes for torch-ddp-bf16-autocast: run the learner's train(rank, world_size) in real processes with real DDP
over gloo (runner.vdev.ddp, communication measured by runner.vdev.comm) and observe its precision in every rank:

- every autocast region entered: device type, dtype, and whether it is enabled (torch.autocast("cuda") on a machine
  without CUDA warns and disables itself);
- every nn.Linear forward: whether CPU autocast was on, the dtypes of its output and its weight;
- every backward: the dtype of the tensor it starts from (the loss);
- every optimizer step: the dtypes of the parameters and their gradients, and how many entries with a non-zero
  gradient kept exactly their value through the step (an update rounded away);
- zero_grad() between a backward and the step that follows it (``wiped_steps``: steps that came after zero_grad()
  had cleared what the backward before them computed, to None or to zeros);
- a GradScaler's work: an optimizer step on gradients a scaler scaled (scaler.scale(loss).backward()) and never
  unscaled (optimizer.step() called directly instead of scaler.step(optimizer)), and optimizer steps that found no
  gradient at all (a step before backward);
- the rank's own collectives (a dist.all_reduce of the loss for logging, gradients all-reduced by hand): every
  call outside a backward pass, counted by op with its bytes;
- the dtypes of the returned state_dict, which travels as float32 (bfloat16 cannot cross the pipe).

Each rank writes what it saw to a file of its own as it goes (at every optimizer step and every collective of
its own, and when train returns or raises), so a rank that raised or hung still reports what it did before.

Observations are forgeable by a learner who patches this file, like every probe's; the final weights, which the
tests compare with a one-process reference, cannot be forged without training as asked. The hidden tests import
the data, the model and the constants from here.
"""

import json
import os
import tempfile
from collections import Counter
from collections.abc import Mapping

import torch
import torch._dynamo  # warms the subject before it forks per-test children: ranks start in ~0.1 s, not seconds
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: F401  (warm, as above)
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)

# The prompt's and the starter's settings.
N_SAMPLES, FEATURES, CLASSES, BATCH, EPOCHS, LR = 512, 16, 4, 32, 3, 0.01
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
        empty_steps=0,
        wiped_steps=0,
        phase=None,
        scaled_steps=0,
        scale=None,
        own={},
        before=[],
        scalers={},
        path=None,
    )


def _report() -> dict:
    """Return what this rank saw so far, as JSON data."""
    return {
        "autocast": dict(_seen["autocast"]),
        "linear": dict(_seen["linear"]),
        "backward": dict(_seen["backward"]),
        "steps": _seen["steps"],
        "param_dtypes": dict(_seen["param_dtypes"]),
        "grad_dtypes": dict(_seen["grad_dtypes"]),
        "updates": _seen["updates"],
        "unchanged": _seen["unchanged"],
        "empty_steps": _seen["empty_steps"],
        "wiped_steps": _seen["wiped_steps"],
        "scaled_steps": _seen["scaled_steps"],
        "scale": _seen["scale"],
        "own": {op: dict(v) for op, v in _seen["own"].items()},
    }


def _dump(**extra) -> None:
    """Write this rank's observations to its file (replaced atomically: a rank killed mid-write keeps the last)."""
    path = _seen.get("path")
    if not path:
        return
    try:
        with open(path + ".tmp", "w") as f:
            json.dump({**_report(), **extra}, f)
        os.replace(path + ".tmp", path)
    except OSError:
        pass


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
            dtype = torch.get_autocast_dtype("cpu") if on else None
            _seen["linear"][f"{on}|{dtype}|{output.dtype}|{module.weight.dtype}"] += 1
            _seen["phase"] = "forward"

    nn.modules.module.register_module_forward_hook(on_forward)

    backward = torch.autograd.backward

    def observed_backward(tensors, *args, **kwargs):
        first = tensors[0] if isinstance(tensors, (list, tuple)) and tensors else tensors
        if isinstance(first, torch.Tensor):
            _seen["backward"][str(first.dtype)] += 1
        _seen["phase"] = "backward"
        return backward(tensors, *args, **kwargs)

    torch.autograd.backward = observed_backward

    def observed_zero_grad(original):
        def zero_grad(self, *args, **kwargs):
            if _seen["phase"] == "backward":  # gradients a backward just computed, cleared before any step used them
                _seen["phase"] = "zeroed_after_backward"
            return original(self, *args, **kwargs)

        return zero_grad

    torch.optim.Optimizer.zero_grad = observed_zero_grad(torch.optim.Optimizer.zero_grad)
    nn.Module.zero_grad = observed_zero_grad(nn.Module.zero_grad)

    from torch.amp.grad_scaler import GradScaler, OptState

    scale = GradScaler.scale

    def observed_scale(self, outputs):
        if self.is_enabled():
            _seen["scalers"][id(self)] = self
        return scale(self, outputs)

    GradScaler.scale = observed_scale

    from runner.vdev import comm
    from torch._C._distributed_c10d import ProcessGroup

    for op in ("allreduce", "allreduce_coalesced", "broadcast", "allgather", "allgather_coalesced",
               "_allgather_base", "allgather_into_tensor_coalesced", "reduce", "reduce_scatter",
               "_reduce_scatter_base", "alltoall", "alltoall_base", "gather", "scatter", "barrier"):
        original = getattr(ProcessGroup, op, None)
        if original is None or getattr(original, "_bf16_probe", False):
            continue

        def collective(self, *args, _op=op, _original=original, **kwargs):
            if not comm._in_backward():  # DDP's gradient sync runs inside backward; anything else is the learner's own
                nbytes = comm._payload(comm._inputs(_op, args))
                entry = _seen["own"].setdefault(_op, {"calls": 0, "bytes": 0})
                entry["calls"] += 1
                entry["bytes"] += int(nbytes)
                _dump()
            return _original(self, *args, **kwargs)

        collective._bf16_probe = True
        setattr(ProcessGroup, op, collective)

    def before_step(optimizer, args, kwargs):
        params = [p for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if not params:
            _seen["empty_steps"] += 1
        if _seen["phase"] == "zeroed_after_backward":
            _seen["wiped_steps"] += 1
        _seen["phase"] = "step"
        for scaler in _seen["scalers"].values():
            state = scaler._per_optimizer_states.get(id(optimizer))
            if state is None or state["stage"] is OptState.READY:  # scaled, and not unscaled for this optimizer
                _seen["scaled_steps"] += 1
                _seen["scale"] = float(scaler.get_scale())
                break
        _seen["scalers"] = {}
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
        _dump()

    register_optimizer_step_pre_hook(before_step)
    register_optimizer_step_post_hook(after_step)


def run(submission, world_size: int = 2, timeout_s: float = 40.0) -> list:
    """Run submission.train on world_size ranks, measuring; return each rank's RankResult.plain() and what it saw.

    Each result gets "seen": the rank's observations (None when it wrote none), also for a rank that raised or
    was stopped.
    """
    from runner.vdev import ddp

    folder = tempfile.mkdtemp(prefix="bf16-seen-")

    def train(rank: int, ws: int):
        _reset()
        _seen["path"] = os.path.join(folder, f"rank{rank}.json")
        _install()
        try:
            state = submission.train(rank, ws)
        except BaseException:
            _dump(finished=False)
            raise
        if not isinstance(state, Mapping):
            _dump(finished=True)
            return state  # the harness reports the wrong type
        tensors = {str(k): v for k, v in state.items() if isinstance(v, torch.Tensor)}
        _dump(finished=True, state_dtypes={k: str(v.dtype) for k, v in tensors.items()})
        return {k: v.detach().float() if v.is_floating_point() else v for k, v in tensors.items()}

    runs = [r.plain() for r in ddp.run(train, world_size=world_size, timeout_s=timeout_s, measure=True)]
    for r in runs:
        try:
            with open(os.path.join(folder, f"rank{r['rank']}.json")) as f:
                r["seen"] = json.load(f)
        except (OSError, ValueError):
            r["seen"] = None
    return runs


def simulate(mode: str = "right", grad_scale: float = 1.0, local: bool = False) -> dict[str, torch.Tensor]:
    """Return the weights after the prompt's training on 2 ranks, simulated in one process, one rank after the other.

    mode: "right" (forward and loss under bf16 autocast, float32 weights), "fp32" (no autocast), "fp16" (CPU
    autocast with float16), "loss_bf16" (the loss computed outside autocast on the bf16 logits), "cast" (the model
    cast to bf16, forward and loss under autocast). grad_scale multiplies every averaged gradient before the step
    (a power of two scales exactly: a loss summed instead of averaged, divided by the world size, gradients summed
    again). local: rank 0's gradient alone, never averaged with rank 1's (DDP's sync bypassed). Each rank's
    gradient is computed on its own batch, as DDP does, and the two are averaged. Imported by the hidden tests (it
    runs in the judge, not next to the learner's code).
    """
    import contextlib

    world = 2
    x, y = make_data()
    model = build_model()
    if mode == "cast":
        model = model.to(torch.bfloat16)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    shards = [list(range(r, N_SAMPLES, world)) for r in range(world)]
    if local:
        shards = shards[:1]
    dtype = torch.float16 if mode == "fp16" else torch.bfloat16
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as in every rank: the same kernels, the same rounding
    try:
        for _ in range(EPOCHS):
            for start in range(0, N_SAMPLES // world, BATCH):
                grads = None
                for shard in shards:
                    rows = shard[start : start + BATCH]
                    model.zero_grad()
                    region = contextlib.nullcontext() if mode == "fp32" else torch.autocast("cpu", dtype=dtype)
                    with region:
                        logits = model(x[rows])
                        loss = F.cross_entropy(logits, y[rows]) if mode != "loss_bf16" else None
                    if loss is None:
                        loss = F.cross_entropy(logits, y[rows])
                    loss.backward()
                    mine = [p.grad / len(shards) for p in model.parameters()]
                    grads = mine if grads is None else [a + b for a, b in zip(grads, mine, strict=True)]
                for p, g in zip(model.parameters(), grads, strict=True):
                    p.grad = g * grad_scale if grad_scale != 1.0 else g
                optimizer.step()
    finally:
        torch.set_num_threads(threads)
    return {k: v.detach().float() for k, v in model.state_dict().items()}
