"""Probes for torch-ddp-eval: run the learner's evaluate(rank, world_size) in real processes over gloo
(runner.vdev.ddp) and report what each rank returned, plus what it did on the way.

Observations (forgeable by a learner who patches this file, like every probe's; the tests compare the returned
counts with the ones they compute themselves, which cannot be forged without evaluating exactly):
- the rows that went through each model build_model() returned on the rank (a forward pre-hook on it), and which
  validation samples those rows are (each row matched against the 101 inputs; -1 for a row that is none of them);
- how many times the rank called build_model();
- every collective the rank called (all_reduce, all_gather, reduce, ...: the learner's own, as nothing else
  communicates here), with the number of values and the dtype it handed over, in order;
- each call of dist.destroy_process_group(), with how many collectives came before it;
- every DistributedSampler the rank iterated: its dataset's length, num_replicas, rank, shuffle, seed, epoch and
  drop_last.
The returned numbers travel as float64 tensors, so a learner may return ints, floats or tensors. The collectives,
the samplers and the samples are written to a file per rank as they happen, so a rank that dies or hangs still
reports what it did before; they come back as the rank's "seen". The hidden tests import the data, the model and
the constants from here.
"""

import json
import os
import shutil
import tempfile
from collections.abc import Mapping

import torch

# Warm the subject before it forks per-test children, so ranks start in ~0.1 s instead of seconds.
import torch._dynamo
from torch import nn

torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)

# The prompt's and the starter's settings.
N_VAL, FEATURES, CLASSES, BATCH = 101, 8, 3, 16
PREFIX = "__probe__."
KEYS = ("correct", "total", "accuracy")


def _classifier() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.ReLU(), nn.Linear(16, CLASSES))


def build_model() -> nn.Module:
    """The starter's trained classifier: weights from seed 0."""
    return _classifier()


def make_val_data() -> tuple[torch.Tensor, torch.Tensor]:
    """The starter's 101 validation samples: x from seed 22; labels the model's predictions, 40% replaced at random."""
    g = torch.Generator().manual_seed(22)
    x = torch.randn(N_VAL, FEATURES, generator=g)
    with torch.no_grad():
        predicted = _classifier()(x).argmax(dim=1)
    noise = torch.randint(0, CLASSES, (N_VAL,), generator=g)
    flip = torch.rand(N_VAL, generator=g) < 0.4
    return x, torch.where(flip, noise, predicted)


def _number(name: str, value) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise TypeError(
                f"evaluate returned a tensor of shape {list(value.shape)} for {name!r}; expected one number"
            )
        return value.detach().reshape(()).to(torch.float64)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.tensor(float(value), dtype=torch.float64)
    raise TypeError(f"evaluate returned {type(value).__name__} for {name!r}; expected a number or a 0-dim tensor")


# ProcessGroup methods the torch.distributed collectives call, and the names learners know them by.
COLLECTIVES = {
    "allreduce": "all_reduce",
    "allreduce_coalesced": "all_reduce_coalesced",
    "allgather": "all_gather",
    "allgather_coalesced": "all_gather_coalesced",
    "_allgather_base": "all_gather_into_tensor",
    "all_gather_single": "all_gather_into_tensor",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
    "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter_tensor",
    "reduce_scatter_single": "reduce_scatter_tensor",
    "alltoall": "all_to_all",
    "alltoall_base": "all_to_all_single",
    "barrier": "barrier",
    "send": "send",
    "recv": "recv",
}
# What a rank hands over: the gathers' and scatters' input is their second argument, every other op's the first.
_SECOND = {
    "allgather",
    "allgather_coalesced",
    "_allgather_base",
    "all_gather_single",
    "gather",
    "reduce_scatter",
    "_reduce_scatter_base",
    "reduce_scatter_single",
    "alltoall",
    "alltoall_base",
}
MAX_LINES = 400  # per rank: collectives and samplers listed
MAX_SAMPLES = 4096  # per rank: sample indices listed (the row count is always complete)


def _tensors(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


class _Log:
    """One rank's observations, appended to a file as they happen (a rank that dies still leaves them)."""

    def __init__(self, path: str) -> None:
        self.file = open(path, "w", buffering=1, encoding="utf-8")  # noqa: SIM115 - open until the rank exits
        self.lines = 0
        self.collectives = 0

    def write(self, **entry) -> None:
        if self.lines < MAX_LINES or entry.get("kind") == "samples":
            self.lines += 1
            self.file.write(json.dumps(entry) + "\n")


def _watch_collectives(log: _Log) -> None:
    from torch._C._distributed_c10d import ProcessGroup

    for op, name in COLLECTIVES.items():
        original = getattr(ProcessGroup, op, None)
        if original is None:
            continue

        def wrapper(self, *args, _op=op, _name=name, _original=original, **kwargs):
            log.collectives += 1
            sent = _tensors(args[1] if _op in _SECOND and len(args) > 1 else (args[0] if args else None))
            log.write(
                kind="collective",
                op=_name,
                values=sum(int(t.numel()) for t in sent),
                shapes=[list(t.shape) for t in sent[:4]],
                dtype=str(sent[0].dtype).removeprefix("torch.") if sent else "",
            )
            return _original(self, *args, **kwargs)

        setattr(ProcessGroup, op, wrapper)


def _watch_samplers(log: _Log) -> None:
    from torch.utils.data.distributed import DistributedSampler

    original = DistributedSampler.__iter__

    def iterate(self):
        try:
            n = len(self.dataset)
        except TypeError:
            n = -1
        log.write(
            kind="sampler",
            dataset=n,
            num_replicas=int(self.num_replicas),
            rank=int(self.rank),
            shuffle=bool(self.shuffle),
            seed=int(self.seed),
            epoch=int(self.epoch),
            drop_last=bool(self.drop_last),
        )
        return original(self)

    DistributedSampler.__iter__ = iterate


def _watch_destroy(log: _Log) -> None:
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    original = distributed_c10d.destroy_process_group

    def destroy(*args, **kwargs):
        log.write(kind="destroy", collectives_before=log.collectives)
        return original(*args, **kwargs)

    dist.destroy_process_group = distributed_c10d.destroy_process_group = destroy


def _read(path: str) -> dict:
    seen: dict = {"collectives": [], "samplers": [], "samples": [], "destroyed_after": []}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return seen
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a line cut short by the rank's death
        kind = entry.pop("kind", None) if isinstance(entry, dict) else None
        if kind == "collective":
            seen["collectives"].append(entry)
        elif kind == "sampler":
            seen["samplers"].append(entry)
        elif kind == "destroy":
            seen["destroyed_after"].append(entry.get("collectives_before", 0))
        elif kind == "samples":
            seen["samples"].extend(entry.get("indices", []))
    seen["samples"] = seen["samples"][:MAX_SAMPLES]
    return seen


def run(submission, world_size: int = 2, timeout_s: float = 40.0) -> list:
    """Run submission.evaluate on world_size ranks; return each rank's RankResult.plain() with observations."""
    from runner.vdev import ddp

    where = tempfile.mkdtemp(prefix="ddp-eval-")
    inputs = make_val_data()[0]

    def evaluate(rank: int, ws: int):
        log = _Log(os.path.join(where, f"rank{rank}.jsonl"))
        _watch_collectives(log)
        _watch_samplers(log)
        _watch_destroy(log)
        seen = {"rows": 0, "built": 0, "listed": 0}
        original = submission.build_model

        def count_rows(module, args):
            first = args[0] if args else None
            if not isinstance(first, torch.Tensor) or first.dim() == 0:
                return
            seen["rows"] += int(first.shape[0])
            if seen["listed"] >= MAX_SAMPLES:
                return
            rows = first.detach()
            if rows.dim() == 2 and rows.shape[1] == FEATURES and rows.is_floating_point():
                same = (rows.to(torch.float32)[:, None, :] == inputs[None]).all(dim=2)
                found = torch.where(same.any(dim=1), same.to(torch.int8).argmax(dim=1), -1)
                indices = [int(i) for i in found]
            else:
                indices = [-1] * int(rows.shape[0])
            seen["listed"] += len(indices)
            log.write(kind="samples", indices=indices)

        def counted_build_model(*args, **kwargs):
            model = original(*args, **kwargs)
            seen["built"] += 1
            if isinstance(model, nn.Module):
                model.register_forward_pre_hook(count_rows)
            return model

        submission.build_model = counted_build_model
        got = submission.evaluate(rank, ws)
        if not isinstance(got, Mapping):
            raise TypeError(f"evaluate must return a dict with keys {list(KEYS)}, not {type(got).__name__}")
        out = {str(k): _number(str(k), v) for k, v in got.items() if k in KEYS}
        out[PREFIX + "rows"] = torch.tensor(seen["rows"])
        out[PREFIX + "built"] = torch.tensor(seen["built"])
        return out

    try:
        runs = [r.plain() for r in ddp.run(evaluate, world_size=world_size, timeout_s=timeout_s)]
        for r in runs:
            r["seen"] = _read(os.path.join(where, f"rank{r['rank']}.jsonl"))
        return runs
    finally:
        shutil.rmtree(where, ignore_errors=True)
