"""Probes for torch-comm-budget-capstone: run the learner's train in two real processes with real DDP over gloo
(runner.vdev.ddp) and measure each rank's communication (runner.vdev.comm: every collective's calls, payload bytes
and dtypes per optimizer step, and the samples that went through DDP's forward).

The weights come back as raw bytes (``_plain``); the hidden tests compute the accuracy from them, which cannot be
forged without training. The measurements are observations a learner who patches this file could forge (see
worker/runner/README.md, Limits). The hidden tests import the data, the model and the constants from here.

Beside the measurements, each rank writes what it observed of the learner's training to a JSON file
(``_observe``), when a hook is registered and when train ends, so that a rank that dies inside torch's C++ still
tells what it had registered (``observed`` in each rank's result; None when the rank wrote nothing):

- ``hooks``: each communication hook DDP accepted (its name, and PowerSGD's ``start_powerSGD_iter``);
- ``hook_calls`` and ``hook_first``: how often the learner's hook ran, and for its first calls ``<out, in>``,
  ``<out, out>`` and ``<in, in>`` of the bucket it was given (in) and of the tensor its future handed DDP (out):
  the tests combine both ranks' figures to see whether the hook handed DDP the ranks' average;
- ``own``: the collectives made on train's own thread outside DDP's gradient sync (the learner's own: a logged
  loss, a metric, a barrier): calls, bytes, ops and bytes by dtype; ``sync_dtypes``: the bytes of DDP's gradient
  sync (the learner's hook and its callbacks, or DDP's own reduction) by dtype;
- ``no_sync_calls``; ``forwards``: the samples that went through DDP's forward inside ``no_sync()`` and outside
  it; ``windows``: the same per optimizer step (the first MAX_WINDOWS), with the hook's calls and whether the
  window's last forward ran inside no_sync() (``last``); the last entry is the window still open when train ends
  (micro-batches no step used);
- ``discards``: the zero_grad calls that threw away gradients no optimizer step had used yet (a backward since the
  last step), and ``first_discard``: the step it happened in, after how many samples through DDP's forward.
"""

import functools
import json
import os
import shutil
import tempfile
import threading
from collections.abc import Mapping

import torch
from torch import nn

# The prompt's and the starter's settings.
N_TRAIN, N_VAL, MICRO, EPOCHS, LR = 512, 256, 16, 8, 3e-3
W_PER_KW = 1000.0
BUDGET = 2_179_088
FIRST_HOOK_CALLS = 4  # hook calls whose input and output are compared: the first sync's buckets
MAX_WINDOWS = 512


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


def _new_window() -> dict:
    return {"sync": 0, "no_sync": 0, "hook_calls": 0, "last": None}


def _observe(train, folder: str):
    """Return ``train`` wrapped to observe the rank's training into ``folder`` (see the module docstring).

    Everything is patched in the rank's own process (forked for this run), after runner.vdev.comm's wrappers, and
    only watches: the learner's hook runs as registered (DDP checks it by its own name and signature, which the
    wrapper carries), and a hook DDP would refuse is passed on unwrapped, to be refused as it would be.
    """

    def observed(rank: int, world_size: int):
        from runner.vdev import comm
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.optim.optimizer import register_optimizer_step_post_hook

        obs: dict = {
            "hooks": [], "hook_calls": 0, "hook_first": [], "own": {"calls": 0, "bytes": 0, "dtypes": {}, "ops": {}},
            "sync_dtypes": {}, "no_sync_calls": 0, "forwards": {"sync": 0, "no_sync": 0}, "windows": [_new_window()],
            "steps": 0, "discards": 0, "first_discard": None,
        }  # fmt: skip
        main = threading.get_ident()
        depth = [0]  # > 0 while train's thread runs a comm hook
        zeroed_at = [0]  # the optimizer steps made when zero_grad was last called
        path = os.path.join(folder, f"rank{rank}.json")

        def save() -> None:
            with open(path + ".tmp", "w") as f:
                json.dump(obs, f)
            os.replace(path + ".tmp", path)

        def window() -> dict:
            return obs["windows"][-1]

        def note(op, nbytes, by_dtype=None, *args, _note=comm.note, **kwargs):
            _note(op, nbytes, by_dtype, *args, **kwargs)
            if threading.get_ident() == main and depth[0] == 0:
                own = obs["own"]
                own["calls"] += 1
                own["bytes"] += int(nbytes)
                own["ops"][op] = own["ops"].get(op, 0) + 1
                into = own["dtypes"]
            else:
                into = obs["sync_dtypes"]
            for name, part in (by_dtype or {}).items():
                into[name] = into.get(name, 0) + int(part)

        comm.note = note  # the collectives' wrappers look it up at each call
        dispatch = comm._Dispatch.__call__

        def dispatched(self, state, bucket):  # DDP's own reduction, through runner.vdev.comm's twin
            depth[0] += 1
            try:
                return dispatch(self, state, bucket)
            finally:
                depth[0] -= 1

        comm._Dispatch.__call__ = dispatched

        def recording(hook):
            @functools.wraps(hook)
            def hook_seen(state, bucket):
                index = obs["hook_calls"]
                obs["hook_calls"] += 1
                window()["hook_calls"] += 1
                given = bucket.buffer().detach().clone() if index < FIRST_HOOK_CALLS else None
                depth[0] += 1
                try:
                    fut = hook(state, bucket)
                finally:
                    depth[0] -= 1
                if given is None or not isinstance(fut, torch._C.Future):
                    return fut  # DDP says what is wrong with anything but a future

                def compare(done):
                    value = done.value()
                    out = value[0] if isinstance(value, (list, tuple)) and value else value
                    if isinstance(out, torch.Tensor) and out.numel() == given.numel():
                        o, i = out.detach().double().flatten(), given.double().flatten()
                        obs["hook_first"].append(
                            {"call": index, "out_in": float(o @ i), "out_out": float(o @ o), "in_in": float(i @ i)}
                        )
                    return value

                return fut.then(compare)

            return hook_seen

        register = DDP.register_comm_hook

        def register_seen(self, state, hook):
            named = callable(hook) and hasattr(hook, "__name__") and hasattr(hook, "__qualname__")
            registered = register(self, state, recording(hook) if named else hook)
            start = getattr(state, "start_powerSGD_iter", None)
            obs["hooks"].append(
                {
                    "name": str(getattr(hook, "__qualname__", type(hook).__name__))[:80],
                    "start_powerSGD_iter": start if isinstance(start, int) else None,
                }
            )
            save()
            return registered

        DDP.register_comm_hook = register_seen
        no_sync = DDP.no_sync

        @functools.wraps(no_sync)
        def no_sync_seen(self):
            obs["no_sync_calls"] += 1
            return no_sync(self)

        DDP.no_sync = no_sync_seen
        forward = DDP.forward

        def forward_seen(self, *inputs, **kwargs):
            first = inputs[0] if inputs else next(iter(kwargs.values()), None)
            if isinstance(first, torch.Tensor) and first.dim() > 0:
                key = "sync" if getattr(self, "require_backward_grad_sync", True) else "no_sync"
                obs["forwards"][key] += int(first.shape[0])
                window()[key] += int(first.shape[0])
                window()["last"] = key
            return forward(self, *inputs, **kwargs)

        forward_seen._gpulab_comm = True  # still runner.vdev.comm's counted forward underneath
        DDP.forward = forward_seen

        def stepped(optimizer, args, kwargs):
            obs["steps"] += 1
            if len(obs["windows"]) < MAX_WINDOWS:
                obs["windows"].append(_new_window())
            else:
                obs["windows"][-1] = _new_window()

        register_optimizer_step_post_hook(stepped)

        def zero_seen(original):
            @functools.wraps(original)
            def zero_grad(self, *args, **kwargs):
                if isinstance(self, nn.Module):
                    params = list(self.parameters())
                else:
                    params = [p for g in getattr(self, "param_groups", []) for p in g["params"]]
                with torch.no_grad():
                    held = any(p.grad is not None and bool(p.grad.any()) for p in params)
                if held and zeroed_at[0] == obs["steps"]:  # a backward since the last step, and no step since
                    obs["discards"] += 1
                    if obs["first_discard"] is None:
                        w = window()
                        obs["first_discard"] = {"step": obs["steps"] + 1, "samples": w["sync"] + w["no_sync"]}
                zeroed_at[0] = obs["steps"]
                return original(self, *args, **kwargs)

            return zero_grad

        torch.optim.Optimizer.zero_grad = zero_seen(torch.optim.Optimizer.zero_grad)
        nn.Module.zero_grad = zero_seen(nn.Module.zero_grad)
        try:
            return train(rank, world_size)
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


def run(submission, world_size: int = 2, timeout_s: float = 40.0) -> list:
    """Run submission.train on world_size ranks, measuring; return each rank's result as data, with ``observed``."""
    from runner.vdev import ddp

    _warm()
    folder = tempfile.mkdtemp(prefix="gpulab-observed-")
    try:
        ranks = ddp.run(_observe(submission.train, folder), world_size=world_size, timeout_s=timeout_s, measure=True)
        results = [_plain(r) for r in ranks]
        for r in results:
            r["observed"] = _read(folder, r["rank"])
        return results
    finally:
        shutil.rmtree(folder, ignore_errors=True)
