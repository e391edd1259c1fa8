"""Probes for torch-fsdp2-shard: run the learner's train in real processes over gloo (runner.vdev.ddp), record
every collective (runner.vdev.comm: FSDP2's all-gathers and reduce-scatters, bytes per optimizer step), and observe
at every optimizer step (a global step pre-hook):

- ``params``: the optimizer's parameters and the model's (the first module the rank calls, the root): how many,
  how many are DTensors, how many bytes this rank holds of them (a DTensor's local shard, else the whole tensor),
  how many of the optimizer's have a ``.grad``, and whether the optimizer holds exactly the model's parameters.

They travel back from the rank as tensors beside the learner's state dict (keys starting ``probe.``) and are split
off here. A DTensor the learner returns cannot leave the rank as it is: the probe sends its local shard instead and
lists its name (``dtensors``), so the test can say what came back. The ranks' gloo collectives time out after
COLLECTIVE_TIMEOUT_S (``init_process_group``'s ``timeout``, unless the learner passes one), so a rank left alone in a
collective raises instead of waiting for the harness to kill it. Like every probe's, these observations could be
forged by a learner who patches this file; the accuracy, computed in the tests from the returned weights, cannot.
The hidden tests import the data, the model and the constants from here.
"""

from collections.abc import Mapping
from datetime import timedelta

import torch
from torch import nn

# The prompt's and the starter's settings.
N_TRAIN, N_VAL, BATCH, EPOCHS, LR = 512, 256, 32, 6, 3e-3
COLLECTIVE_TIMEOUT_S = 15.0
_PREFIX = "probe."


def make_dataset() -> tuple[torch.Tensor, torch.Tensor]:
    """The starter's 768 samples: 32 features and one of 4 classes from a fixed random teacher."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(N_TRAIN + N_VAL, 32, generator=g)
    teacher = torch.randn(32, 4, generator=g)
    return x, (x @ teacher).argmax(dim=1)


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 4)
    )


def _local_bytes(p: torch.Tensor) -> int:
    from torch.distributed.tensor import DTensor

    t = p.to_local() if isinstance(p, DTensor) else p
    return int(t.numel() * t.element_size())


def _watch() -> list:
    """In a rank: remember the first module called (the root) and sample the parameters at every optimizer step."""
    from torch.distributed.tensor import DTensor
    from torch.nn.modules.module import register_module_forward_pre_hook
    from torch.optim.optimizer import register_optimizer_step_pre_hook

    roots: list = []
    rows: list = []

    def first_call(module, args):
        if not roots:
            roots.append(module)

    def before_step(optimizer, args, kwargs):
        mine = [p for g in optimizer.param_groups for p in g["params"]]
        model = list(roots[0].parameters()) if roots else []
        rows.append([
            len(mine),
            sum(isinstance(p, DTensor) for p in mine),
            sum(p.grad is not None for p in mine),
            sum(_local_bytes(p) for p in mine),
            len(model),
            sum(isinstance(p, DTensor) for p in model),
            sum(_local_bytes(p) for p in model),
            int({id(p) for p in mine} == {id(p) for p in model}),
        ])  # fmt: skip

    register_module_forward_pre_hook(first_call)
    register_optimizer_step_pre_hook(before_step)
    return rows


_PARAM_FIELDS = (
    "opt_params", "opt_dtensors", "opt_grads", "opt_bytes", "model_params", "model_dtensors", "model_bytes", "same",
)  # fmt: skip


def _timeout_collectives() -> None:
    """Give the rank's process group a collective timeout of COLLECTIVE_TIMEOUT_S unless the learner sets one."""
    import torch.distributed as dist

    original = dist.init_process_group

    def init(*args, **kwargs):
        kwargs.setdefault("timeout", timedelta(seconds=COLLECTIVE_TIMEOUT_S))
        return original(*args, **kwargs)

    dist.init_process_group = init


def _sendable(state) -> tuple[dict, list[str]]:
    """Return state with every DTensor replaced by its local shard, and the names of those entries."""
    from torch.distributed.tensor import DTensor

    out, names = {}, []
    for k, v in state.items():
        if isinstance(v, DTensor):
            names.append(str(k))
            v = v.to_local()
        out[k] = v
    return out, names


def _plain(rank_result) -> dict:
    """Return a rank's result as data, its ``probe.`` tensors split off into ``observed``.

    The weights travel as raw little-endian bytes (``bytes``, with ``dtype`` and ``shape``), not as lists of numbers.
    """
    result = rank_result.plain()
    result["state"] = {
        k: {"dtype": str(v.dtype), "shape": list(v.shape), "bytes": v.astype(v.dtype.newbyteorder("<")).tobytes()}
        for k, v in rank_result.state.items()
        if not k.startswith(_PREFIX)
    }
    raw = {k[len(_PREFIX) :]: v for k, v in rank_result.state.items() if k.startswith(_PREFIX)}
    rows = raw["params"].tolist() if "params" in raw else []
    names = bytes(raw["dtensors"].tolist()).decode() if "dtensors" in raw else ""
    result["observed"] = {
        "params": [dict(zip(_PARAM_FIELDS, row, strict=True)) for row in rows],
        "dtensors": [n for n in names.split("\n") if n],
    }
    if result["comm"]:
        result["comm"].pop("per_step", None)  # the calls list says it all; keep the reply small
    return result


def _warm() -> None:
    """Import what FSDP2, its state dict and the optimizer import lazily, before the ranks fork (they then start in
    ~0.1 s instead of paying seconds each). Done here, not at import: the judge imports this file too, for the data
    and the model, and never forks ranks."""
    import torch._dynamo  # noqa: F401
    import torch.distributed.checkpoint.state_dict  # noqa: F401
    import torch.distributed.fsdp  # noqa: F401

    torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=0.1)


def run(submission, world_size: int = 2, timeout_s: float = 40.0) -> list:
    """Run submission.train on world_size ranks, measuring; return each rank's result with ``observed``."""
    from runner.vdev import ddp

    _warm()

    def train(rank: int, ws: int):
        rows = _watch()
        _timeout_collectives()
        state = submission.train(rank, ws)
        if not isinstance(state, Mapping):
            return state  # the harness reports what train returned instead of a dict
        state, dtensors = _sendable(dict(state))
        return {
            **state,
            _PREFIX + "params": torch.tensor(rows, dtype=torch.int64).reshape(-1, len(_PARAM_FIELDS)),
            _PREFIX + "dtensors": torch.tensor(list("\n".join(dtensors).encode()), dtype=torch.uint8),
        }

    return [_plain(r) for r in ddp.run(train, world_size=world_size, timeout_s=timeout_s, measure=True)]
