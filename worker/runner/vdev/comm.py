"""Measure what one rank communicates: collective calls and payload bytes per optimizer step, and its compute time.

Contract (torch 2.13, any backend; measured on gloo, see README.md "Communication measurements"):
- ``install()`` in a rank, before the learner's code builds its model, starts recording; ``report()`` returns
  what was recorded as JSON data (numbers, lists and short strings only). ``runner.vdev.ddp.run(...,
  measure=True)`` does both in every rank and hands the report back as ``RankResult.comm``.
- A **step** is one ``Optimizer.step`` (a global post-hook counts it). Window ``i`` holds what happened after
  step ``i - 1`` and up to step ``i``; what came after the last step is the ``tail``.
- **Collectives**: every Python-visible collective of ``ProcessGroup`` (``allreduce``, ``broadcast``,
  ``allgather``, ...) is wrapped at class level, so ``dist.all_reduce`` & co and Python comm hooks are seen.
  DDP's own gradient all-reduce runs in C++ (``Reducer`` -> ``ProcessGroup::allreduce``) and never passes
  through Python, so every ``DistributedDataParallel`` gets, at its first ``forward``, the Python twin of the
  built-in reduction (``default_hooks.allreduce_hook``: divide by the world size, then all-reduce the bucket),
  unless the learner registered a hook of their own (which goes through the wrapped methods itself); one the
  learner registers after that forward (DDP allows it until the first backward) replaces the twin; one DDP
  refuses (it raises) changes nothing, so the twin still counts DDP's reduction.
  Not seen: DDP's start-up broadcast of rank 0's weights (``_broadcast_coalesced`` in C++), its all-reduce of
  the used-parameter map each step under ``find_unused_parameters=True`` (C++), and C++ built-in hooks
  (``_register_builtin_comm_hook``).
- **Bytes** are the payload a rank hands to the collective: ``numel * element_size`` of its input tensors;
  ``dtypes`` sums them by dtype name over the run (``float32``, ``bfloat16``), so a compression hook shows.
  What travels on the wire depends on the algorithm (a ring all-reduce sends ``2 (n - 1) / n`` of it); the
  cost model (``runner/costmodel.py``) says which figure it uses.
- **Compute** per window is the main thread's CPU time (``time.thread_time``): gloo works and waits in threads
  of its own, so time spent waiting for the other rank is not counted as compute.
- **Samples** are the rows of the first tensor argument of each DDP ``forward``.
- **In a backward pass or not**: a collective called while autograd runs a backward pass (DDP's gradient
  reduction, its twin or a learner's comm hook, FSDP's gradient reduce-scatter) also counts in its window's
  ``backward_calls``/``backward_bytes``; every other one (the learner's own ``dist.all_reduce`` of a loss, a
  broadcast, a manual gradient average after ``backward``; FSDP's forward all-gathers) is summed by op in
  ``ops_outside_backward``, so an exercise can tell a learner's own collectives from DDP's.
"""

from __future__ import annotations

import time
from typing import Any

MAX_CALLS = 2048  # calls listed one by one (the sums per window are always complete)
MAX_WINDOWS = 4096
COLLECTIVES = (
    "allreduce",
    "allreduce_coalesced",
    "broadcast",
    "allgather",
    "allgather_coalesced",
    "allgather_into_tensor_coalesced",
    "_allgather_base",
    "all_gather_single",
    "reduce",
    "reduce_scatter",
    "_reduce_scatter_base",
    "reduce_scatter_tensor_coalesced",
    "reduce_scatter_single",
    "alltoall",
    "alltoall_base",
    "gather",
    "scatter",
    "barrier",
)

_state: dict[str, Any] = {}
_step_hook_handle: list[Any] = []  # the optimizer post-hook is global: registered once per process


def _new_window() -> dict[str, Any]:
    return {"calls": 0, "bytes": 0, "backward_calls": 0, "backward_bytes": 0, "samples": 0, "compute_s": 0.0}


def reset() -> None:
    """Forget everything recorded so far (a fresh rank starts empty)."""
    _state.clear()
    _state.update(
        windows=[_new_window()],
        calls=[],
        ops={},
        ops_outside_backward={},
        dtypes={},
        clock=time.thread_time(),
        ddp_hooks=0,
        own_hooks=0,
    )


def _payload(value: Any, by_dtype: dict[str, int] | None = None) -> int:
    """Return the bytes of the tensors in ``value`` (nested lists too), adding each to ``by_dtype`` by dtype name."""
    import torch

    if isinstance(value, torch.Tensor):
        nbytes = int(value.numel() * value.element_size())
        if by_dtype is not None:
            name = str(value.dtype).removeprefix("torch.")
            by_dtype[name] = by_dtype.get(name, 0) + nbytes
        return nbytes
    if isinstance(value, (list, tuple)):
        return sum(_payload(v, by_dtype) for v in value)
    return 0


def _inputs(op: str, args: tuple[Any, ...]) -> Any:
    """Return what this rank sends: for gathers the input (second list), else the first tensor argument."""
    if not args:
        return None
    if op in ("allgather", "allgather_coalesced", "reduce_scatter", "gather", "alltoall") and len(args) > 1:
        return args[1]
    if (
        op in ("_allgather_base", "all_gather_single", "_reduce_scatter_base", "reduce_scatter_single", "alltoall_base")
        and len(args) > 1
    ):
        return args[1]
    return args[0]


def note(op: str, nbytes: int, by_dtype: dict[str, int] | None = None, *, in_backward: bool = False) -> None:
    """Record one collective of ``nbytes`` payload bytes (``by_dtype``: the same bytes by dtype name).

    ``in_backward``: it was called while autograd ran a backward pass (DDP's gradient reduction, a comm hook).
    """
    if not _state:
        return
    window = _state["windows"][-1]
    window["calls"] += 1
    window["bytes"] += nbytes
    if in_backward:
        window["backward_calls"] += 1
        window["backward_bytes"] += nbytes
    else:
        outside = _state["ops_outside_backward"].setdefault(op, {"calls": 0, "bytes": 0})
        outside["calls"] += 1
        outside["bytes"] += nbytes
    for name, part in (by_dtype or {}).items():
        _state["dtypes"][name] = _state["dtypes"].get(name, 0) + part
    stats = _state["ops"].setdefault(op, {"calls": 0, "bytes": 0})
    stats["calls"] += 1
    stats["bytes"] += nbytes
    if len(_state["calls"]) < MAX_CALLS:
        _state["calls"].append([len(_state["windows"]) - 1, op, nbytes])


def _in_backward() -> bool:
    """Return whether autograd is running a backward pass in this thread (DDP's hooks run inside one)."""
    import torch

    task = getattr(torch._C, "_current_graph_task_id", None)
    return task is not None and task() != -1


def _wrap_collectives(pg_class: Any) -> None:
    for op in COLLECTIVES:
        original = getattr(pg_class, op, None)
        if original is None or getattr(original, "_gpulab_comm", False):
            continue

        def wrapper(self: Any, *args: Any, _op: str = op, _original: Any = original, **kwargs: Any) -> Any:
            by_dtype: dict[str, int] = {}
            note(_op, _payload(_inputs(_op, args), by_dtype), by_dtype, in_backward=_in_backward())
            return _original(self, *args, **kwargs)

        wrapper._gpulab_comm = True  # type: ignore[attr-defined]
        setattr(pg_class, op, wrapper)


def _step_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
    if not _state:
        return
    now = time.thread_time()
    window = _state["windows"][-1]
    window["compute_s"] += now - _state["clock"]
    _state["clock"] = now
    if len(_state["windows"]) < MAX_WINDOWS:
        _state["windows"].append(_new_window())
    else:  # very long runs: keep counting into the last window rather than growing without bound
        _state["windows"][-1] = _new_window()
    _state["steps"] = _state.get("steps", 0) + 1


class _Dispatch:
    """The comm hook ``comm`` registers on a DDP wrapper: it runs whichever hook is current.

    DDP takes one comm hook per wrapper, and DDP's docs only ask that it come before the first backward. ``comm``
    registers at the first forward, so a learner's hook registered between that forward and the backward must
    still be accepted: it replaces the target here instead of reaching the reducer a second time.
    """

    def __init__(self, state: Any, hook: Any) -> None:
        self.state, self.hook = state, hook

    def __call__(self, _unused: Any, bucket: Any) -> Any:
        return self.hook(self.state, bucket)


def _dispatch_hook(dispatch, bucket):  # type: ignore[no-untyped-def]  # DDP refuses annotations but its own
    return dispatch(None, bucket)


def _wrap_ddp(ddp: Any) -> None:
    if getattr(ddp.forward, "_gpulab_comm", False):
        return
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    forward, register = ddp.forward, ddp.register_comm_hook
    builtin: Any = getattr(ddp, "_register_builtin_comm_hook", None)

    def counted_forward(self: Any, *inputs: Any, **kwargs: Any) -> Any:
        import torch

        if not getattr(self, "_gpulab_hooked", False):
            # The built-in C++ reduction is invisible to Python: use its Python twin, which calls the
            # (wrapped) ProcessGroup.allreduce, through a dispatcher a later learner hook can retarget.
            self._gpulab_hooked = True
            self._gpulab_dispatch = _Dispatch(self.process_group, default_hooks.allreduce_hook)
            register(self, self._gpulab_dispatch, _dispatch_hook)
            if _state:
                _state["ddp_hooks"] += 1
        first = inputs[0] if inputs else next(iter(kwargs.values()), None)
        if _state and isinstance(first, torch.Tensor) and first.dim() > 0:
            _state["windows"][-1]["samples"] += int(first.shape[0])
        return forward(self, *inputs, **kwargs)

    def own_hook(self: Any, state: Any, hook: Any) -> Any:
        # A hook DDP refuses (a second one, a bad signature, a bf16 hook without CUDA and NCCL) raises before
        # anything changes: a learner who catches the error and trains on keeps DDP's own reduction, which the
        # twin must then still count. So a wrapper counts as hooked only once its hook was accepted.
        dispatch = getattr(self, "_gpulab_dispatch", None)
        if dispatch is not None and dispatch.hook is default_hooks.allreduce_hook:
            self._check_comm_hook(hook)  # DDP's own checks of the hook's signature
            dispatch.state, dispatch.hook = state, hook
            registered = None
        else:
            registered = register(self, state, hook)  # a second registration fails here, as in DDP
            self._gpulab_hooked = True
        if _state:
            _state["own_hooks"] += 1
        return registered

    def own_builtin(self: Any, *args: Any, **kwargs: Any) -> Any:
        registered = builtin(self, *args, **kwargs)
        self._gpulab_hooked = True  # C++ hook: its all-reduces stay invisible (documented)
        if _state:
            _state["own_hooks"] += 1
        return registered

    counted_forward._gpulab_comm = True  # type: ignore[attr-defined]
    ddp.forward = counted_forward
    ddp.register_comm_hook = own_hook
    if builtin is not None:
        ddp._register_builtin_comm_hook = own_builtin


def install() -> None:
    """Start recording in this process: wrap the collectives and DDP, count optimizer steps."""
    from torch._C._distributed_c10d import ProcessGroup
    from torch.nn.parallel import DistributedDataParallel
    from torch.optim.optimizer import register_optimizer_step_post_hook

    reset()
    _wrap_collectives(ProcessGroup)
    _wrap_ddp(DistributedDataParallel)
    if not _step_hook_handle:
        _step_hook_handle.append(register_optimizer_step_post_hook(_step_hook))


def report() -> dict[str, Any]:
    """Return what was recorded: steps, one entry per step window, the tail after the last step, per-op sums."""
    if not _state:
        return {}
    steps = int(_state.get("steps", 0))
    windows = _state["windows"]
    tail = dict(windows[-1])
    tail["compute_s"] = round(tail["compute_s"] + time.thread_time() - _state["clock"], 6)
    per_step = [{**w, "compute_s": round(w["compute_s"], 6)} for w in windows[:-1]]
    return {
        "steps": steps,
        "per_step": per_step,
        "tail": tail,
        "ops": {k: dict(v) for k, v in sorted(_state["ops"].items())},
        "ops_outside_backward": {k: dict(v) for k, v in sorted(_state["ops_outside_backward"].items())},
        "dtypes": dict(sorted(_state["dtypes"].items())),
        "calls": [list(c) for c in _state["calls"]],
        "calls_truncated": len(_state["calls"]) >= MAX_CALLS,
        "samples": sum(w["samples"] for w in windows),
        "ddp_default_hooks": _state["ddp_hooks"],
        "own_hooks": _state["own_hooks"],
    }
