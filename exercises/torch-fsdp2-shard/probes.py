"""Probes for torch-fsdp2-shard: run the learner's train in real processes over gloo (runner.vdev.ddp), record
every collective (runner.vdev.comm: FSDP2's all-gathers and reduce-scatters, bytes per optimizer step), and observe
each rank's training (``observed`` in each rank's result, None when the rank wrote nothing). A rank writes what it
observed to a JSON file at every optimizer step and when train ends, so a rank that raised or hung still tells how
far it got:

- ``params``, one row per optimizer step (a global step pre-hook): the optimizer's parameters and the model's (the
  first module the rank calls, the root): how many, how many are DTensors, how many bytes this rank holds of them (a
  DTensor's local shard, else the whole tensor), how many of the optimizer's have a ``.grad``, and whether the
  optimizer holds exactly the model's parameters;
- ``optimizer``: the optimizer's class and learning rates at each step (distinct values);
- ``groups``: at the first step, the model's FSDP groups: for each module ``fully_shard`` was applied to (its name in
  the root, "" for the root), the parameters its group manages, whether FSDP made it a root, and whether its
  parameters are dropped again after its forward (``reshard_after_forward``);
- ``grads``: how many steps stepped gradients other than those the last ``backward()`` left (compared bit for bit,
  each parameter's local gradient right after ``torch.autograd.backward`` returned and again before the step), and
  in ``scales`` the one factor the stepped gradients were of backward()'s at such a step (None: no single factor);
- ``own``: the collectives no FSDP, DTensor or state-dict code called (the learner's own: a logging all_reduce, a
  manual gradient average): calls and bytes by op, and how many came between a backward and the next step;
  ``fsdp_gathers``: FSDP's own all-gathers (count, largest payload a rank sent), so neither is mistaken for the
  other;
- ``shard``: what ``shard(model)`` returned (the type's name, and whether it was the model it was given);
- ``returned``: the type of what train returned, and whether it is a mapping; ``dtensors``: the names of returned
  DTensors (their local shards travel instead); ``dtypes``: each returned tensor's dtype (a tensor numpy cannot
  hold, bfloat16, travels as float32); ``non_tensors``: entries that were not tensors (left out).

The ranks' gloo collectives time out after COLLECTIVE_TIMEOUT_S (``init_process_group``'s ``timeout``, unless the
learner passes one), so a rank left alone in a collective raises instead of waiting for the harness to kill it.
Like every probe's, these observations could be forged by a learner who patches this file; the accuracy, computed
in the tests from the returned weights, cannot. The hidden tests import the data, the model and the constants from
here.
"""

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from datetime import timedelta

import torch
from torch import nn

# The prompt's and the starter's settings.
N_TRAIN, N_VAL, BATCH, EPOCHS, LR = 512, 256, 32, 6, 3e-3
COLLECTIVE_TIMEOUT_S = 15.0
GATHERS = (
    "all_gather_single",
    "_allgather_base",
    "allgather",
    "allgather_coalesced",
    "allgather_into_tensor_coalesced",
)
_FSDP_CODE = ("/torch/distributed/fsdp/",)
_LIBRARY_CODE = (  # collectives torch makes for the learner: DTensor's, the state dict's, the device mesh's
    "/torch/distributed/tensor/",
    "/torch/distributed/checkpoint/",
    "/torch/distributed/_functional",
    "/torch/distributed/_state_dict_utils",
    "/torch/distributed/device_mesh",
    "/torch/distributed/_composable/",
)


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


def _local(t):
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def _common_scale(params, after_backward) -> float | None:
    """The one factor every stepped gradient is of the one backward() left (None when there is no single one)."""
    found = None
    for p in params:
        if p.grad is None or id(p) not in after_backward:
            continue
        before, now = after_backward[id(p)], _local(p.grad).detach()
        if before.shape != now.shape:
            return None
        nonzero = before != 0
        if not bool(nonzero.any()):
            continue
        ratio = float((now[nonzero] / before[nonzero]).flatten()[0])
        if not torch.allclose(now, before * ratio, rtol=1e-5, atol=1e-12):
            return None
        if found is not None and abs(ratio - found) > 1e-5 * abs(found):
            return None
        found = ratio
    return None if found is None else round(found, 6)


def _local_bytes(p: torch.Tensor) -> int:
    t = _local(p)
    return int(t.numel() * t.element_size())


def _origin() -> str:
    """Who called the collective being recorded: "fsdp", "library" (DTensor, state dict) or "own" (the learner)."""
    frame = sys._getframe(2)
    found = "own"
    while frame is not None:
        name = frame.f_code.co_filename.replace("\\", "/")
        if any(part in name for part in _FSDP_CODE):
            return "fsdp"
        if any(part in name for part in _LIBRARY_CODE):
            found = "library"
        frame = frame.f_back
    return found


def _groups(root: nn.Module) -> list:
    """The FSDP groups of root's tree: [module name, parameter names, is a root, reshards after forward]."""
    from torch.distributed.fsdp import FSDPModule

    names = {id(p): n for n, p in root.named_parameters(remove_duplicate=False)}
    seen, out = set(), []
    for mname, module in root.named_modules():
        if not isinstance(module, FSDPModule):
            continue
        try:
            state = module._get_fsdp_state()
        except Exception:
            state = None
        if state is not None and id(state) in seen:
            continue
        if state is not None:
            seen.add(id(state))
        params, reshard = [], None
        for group in getattr(state, "_fsdp_param_groups", None) or []:
            reshard = bool(getattr(group, "post_forward_mesh_info", None) is not None)
            for fp in group.fsdp_params:
                params.append(names.get(id(getattr(fp, "sharded_param", None)), "?"))
        out.append([mname, params, bool(getattr(state, "_is_root", False)), reshard])
    return out


def _observe(submission, folder: str):
    """Return a train for runner.vdev.ddp that runs submission.train and observes it (see the module docstring)."""

    def observed(rank: int, world_size: int):
        import torch.distributed as dist
        from runner.vdev import comm
        from torch.distributed.tensor import DTensor
        from torch.nn.modules.module import register_module_forward_pre_hook
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        obs: dict = {
            "params": [], "optimizer": [], "groups": None, "grads": {"compared": 0, "changed": 0, "first": None,
                      "scales": []},
            "own": {"calls": 0, "bytes": 0, "ops": {}, "after_backward": 0, "after_backward_bytes": 0, "steps": []},
            "fsdp_gathers": {"calls": 0, "largest": 0}, "shard": None, "returned": None, "dtensors": [],
            "dtypes": {}, "non_tensors": [],
        }  # fmt: skip
        path = os.path.join(folder, f"rank{rank}.json")
        roots: list = []
        after_backward: dict = {}  # id(param) -> its local gradient right after the last backward
        pending = [False]  # a backward finished and no step has come since

        def save() -> None:
            with open(path + ".tmp", "w") as f:
                json.dump(obs, f)
            os.replace(path + ".tmp", path)

        def note(op, nbytes, by_dtype=None, *args, _note=comm.note, **kwargs):
            _note(op, nbytes, by_dtype, *args, **kwargs)
            origin = _origin()
            if origin == "fsdp" and op in GATHERS:
                obs["fsdp_gathers"]["calls"] += 1
                obs["fsdp_gathers"]["largest"] = max(obs["fsdp_gathers"]["largest"], int(nbytes))
            elif origin == "own":
                own = obs["own"]
                own["calls"] += 1
                own["bytes"] += int(nbytes)
                own["ops"][op] = own["ops"].get(op, 0) + 1
                if pending[0]:
                    own["after_backward"] += 1
                    own["after_backward_bytes"] += int(nbytes)
                    step = len(obs["params"])
                    if step not in own["steps"] and len(own["steps"]) < 64:
                        own["steps"].append(step)
                save()  # before the collective runs: a rank left waiting in it still tells that it called it

        comm.note = note

        def first_call(module, args):
            if not roots:
                roots.append(module)

        backward = torch.autograd.backward

        def observed_backward(*args, **kwargs):
            result = backward(*args, **kwargs)
            after_backward.clear()
            if roots:
                for p in roots[0].parameters():
                    if p.grad is not None:
                        after_backward[id(p)] = _local(p.grad).detach().clone()
            pending[0] = True
            return result

        def before_step(optimizer, args, kwargs):
            mine = [p for g in optimizer.param_groups for p in g["params"]]
            model = list(roots[0].parameters()) if roots else []
            obs["params"].append([
                len(mine),
                sum(isinstance(p, DTensor) for p in mine),
                sum(p.grad is not None for p in mine),
                sum(_local_bytes(p) for p in mine),
                len(model),
                sum(isinstance(p, DTensor) for p in model),
                sum(_local_bytes(p) for p in model),
                int({id(p) for p in mine} == {id(p) for p in model}),
            ])  # fmt: skip
            lrs = sorted({float(g.get("lr", float("nan"))) for g in optimizer.param_groups})
            seen = [type(optimizer).__name__, lrs]
            if seen not in obs["optimizer"] and len(obs["optimizer"]) < 8:
                obs["optimizer"].append(seen)
            if obs["groups"] is None and roots:
                try:
                    obs["groups"] = _groups(roots[0])
                except Exception as exc:  # an observation must never break the learner's run
                    obs["groups"] = [["?", [f"{type(exc).__name__}"], False, None]]
            if pending[0] and after_backward:
                grads = obs["grads"]
                grads["compared"] += 1
                changed = any(
                    p.grad is not None
                    and id(p) in after_backward
                    and not torch.equal(_local(p.grad).detach(), after_backward[id(p)])
                    for p in mine
                )
                if changed:
                    grads["changed"] += 1
                    if grads["first"] is None:
                        grads["first"] = len(obs["params"])
                    scale = _common_scale(mine, after_backward)
                    if scale not in grads["scales"] and len(grads["scales"]) < 4:
                        grads["scales"].append(scale)
            pending[0] = False
            after_backward.clear()
            save()

        register_module_forward_pre_hook(first_call)
        register_optimizer_step_pre_hook(before_step)
        torch.autograd.backward = observed_backward

        init = dist.init_process_group

        def init_with_timeout(*args, **kwargs):
            kwargs.setdefault("timeout", timedelta(seconds=COLLECTIVE_TIMEOUT_S))
            return init(*args, **kwargs)

        dist.init_process_group = init_with_timeout
        shard = getattr(submission, "shard", None)
        if callable(shard):

            def observed_shard(model, *args, **kwargs):
                got = shard(model, *args, **kwargs)
                obs["shard"] = [type(got).__name__, got is model]
                return got

            submission.shard = observed_shard
        try:
            state = submission.train(rank, world_size)
            obs["returned"] = [type(state).__name__, isinstance(state, Mapping)]
            out = {}
            if isinstance(state, Mapping):
                for k, v in state.items():
                    if not isinstance(v, torch.Tensor):
                        obs["non_tensors"].append([str(k), type(v).__name__])
                        continue
                    if isinstance(v, DTensor):
                        obs["dtensors"].append(str(k))
                        v = v.to_local()
                    v = v.detach().cpu()
                    obs["dtypes"][str(k)] = str(v.dtype).removeprefix("torch.")
                    if v.dtype in (torch.bfloat16,) or v.dtype.is_complex:
                        v = v.float() if not v.dtype.is_complex else v.real.float()
                    out[str(k)] = v
            return out
        finally:
            save()

    return observed


def _read(folder: str, rank: int):
    try:
        with open(os.path.join(folder, f"rank{rank}.json")) as f:
            found = json.load(f)
    except (OSError, ValueError):
        return None
    return found if isinstance(found, Mapping) else None


_PARAM_FIELDS = (
    "opt_params", "opt_dtensors", "opt_grads", "opt_bytes", "model_params", "model_dtensors", "model_bytes", "same",
)  # fmt: skip


def _plain(rank_result, observed) -> dict:
    """Return a rank's result as data, with what it observed.

    The weights travel as raw little-endian bytes (``bytes``, with ``dtype`` and ``shape``), not as lists of numbers.
    """
    result = rank_result.plain()
    result["state"] = {
        k: {"dtype": str(v.dtype), "shape": list(v.shape), "bytes": v.astype(v.dtype.newbyteorder("<")).tobytes()}
        for k, v in rank_result.state.items()
    }
    if observed is not None:
        observed["params"] = [dict(zip(_PARAM_FIELDS, row, strict=True)) for row in observed.get("params", [])]
    result["observed"] = observed
    if result["comm"]:
        result["comm"].pop("per_step", None)  # the calls list says it all; keep the reply small
    return result


def _warm() -> None:
    """Import what FSDP2, its state dict and the optimizer import lazily, before the ranks fork (they then start in
    ~0.1 s instead of paying seconds each). Done here, not at import: the judge imports this file too, for the data
    and the model, and never forks ranks."""
    import torch._dynamo
    import torch.distributed.checkpoint.state_dict
    import torch.distributed.fsdp

    torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=0.1)


def run(submission, world_size: int = 2, timeout_s: float = 40.0) -> list:
    """Run submission.train on world_size ranks, measuring; return each rank's result with ``observed``."""
    from runner.vdev import ddp

    _warm()
    folder = tempfile.mkdtemp(prefix="gpulab-observed-")
    try:
        ranks = ddp.run(_observe(submission, folder), world_size=world_size, timeout_s=timeout_s, measure=True)
        return [_plain(r, _read(folder, r.rank)) for r in ranks]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
