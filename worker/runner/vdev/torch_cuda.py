"""Virtual CUDA devices for CPU builds of PyTorch.

Contract:
- ``enable(n)`` makes ``torch.cuda`` report ``n`` devices named ``"virtual CUDA (CPU)"``; tensors and modules
  moved to ``cuda``/``cuda:i`` keep their data on the CPU but report ``device == cuda:i``, ``is_cuda``,
  ``get_device() == i``. Ops mixing devices raise PyTorch's own error text; results and gradients carry the
  device of their inputs; ``torch._foreach_*`` ops (optimizer steps) check and tag each list position on its own,
  so one optimizer may hold parameters of several devices (model parallelism). ``nn.DataParallel`` runs its real
  ``forward`` with virtual scatter, replicate, apply and gather (see ``torch_dp``). ``disable()`` restores every
  patched attribute.
- ``moves()`` lists each device move the learner asked for, as ``Move(what, src, dst)``.
- Only for workers without a GPU: on GPU workers the real ``torch.cuda`` is used and this is never enabled.
- ``enable`` imports torch, patches attributes and pushes a ``TorchFunctionMode``; it starts no thread, so a
  template process may call it before forking. The mode is thread-local: tensors created in other threads
  are plain CPU tensors.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

DEVICE_NAME = "virtual CUDA (CPU)"
# Stored on each tensor object that lives on a virtual device: the device index. CPU tensors carry nothing.
_TAG = "_gpulab_vcuda"


class Move(NamedTuple):
    """One device move the learner asked for: what moved, from which device to which."""

    what: str
    src: str
    dst: str


@dataclass(frozen=True)
class VirtualDeviceProperties:
    """Stand-in for ``torch.cuda.get_device_properties`` with the fields learners and torch read."""

    name: str
    total_memory: int
    multi_processor_count: int
    major: int = 0
    minor: int = 0
    is_integrated: int = 0
    is_multi_gpu_board: int = 0


class _State:
    """What is enabled now; one per process."""

    def __init__(self) -> None:
        self.count = 0
        self.current = 0
        self.log: list[Move] = []
        self.quiet = 0  # >0 while a module move or DataParallel runs: log the outer action only
        self.mode: _VirtualCudaMode | None = None
        self.saved: list[tuple[Any, str, bool, Any]] = []


_state = _State()


def enabled() -> bool:
    """Return whether virtual CUDA is on in this process."""
    return _state.mode is not None


def device_count() -> int:
    """Return the number of virtual devices (0 when off)."""
    return _state.count if enabled() else 0


def describe() -> str:
    """Return the label shown next to results graded on virtual devices."""
    n = device_count()
    return f"{n} virtual CUDA device{'s' if n != 1 else ''} (CPU)"


def moves() -> list[Move]:
    """Return the device moves recorded since ``enable`` (or ``reset_moves``)."""
    return list(_state.log)


def reset_moves() -> None:
    """Forget the recorded moves."""
    _state.log.clear()


def index_of(t: torch.Tensor) -> int | None:
    """Return the virtual device index of ``t``, or None for a CPU tensor."""
    idx = getattr(t, _TAG, None)
    return idx if isinstance(idx, int) else None


def _set_index(t: torch.Tensor, idx: int | None) -> None:
    if idx is None:
        if _TAG in t.__dict__:
            delattr(t, _TAG)
    else:
        setattr(t, _TAG, idx)


def _name(idx: int | None) -> str:
    return "cpu" if idx is None else f"cuda:{idx}"


def _record(what: str, src: int | None, dst: int | None) -> None:
    if _state.quiet == 0:
        _state.log.append(Move(what, _name(src), _name(dst)))


class _Quiet:
    """Suppress per-tensor move records while an outer action (module move, DataParallel) runs."""

    def __enter__(self) -> None:
        _state.quiet += 1

    def __exit__(self, *exc: object) -> None:
        _state.quiet -= 1


def quiet() -> _Quiet:
    """Return a context in which tensor moves are not recorded."""
    return _Quiet()


class _NotADevice(Exception):
    """The argument names a device this layer does not handle (meta, mps...): let torch decide."""


def _check_ordinal(idx: int) -> int:
    if not 0 <= idx < _state.count:
        # What a real CUDA build says for an ordinal past the last GPU.
        raise RuntimeError("CUDA error: invalid device ordinal")
    return idx


def parse_device(dev: Any) -> int | None:
    """Return the virtual index ``dev`` names (None for cpu); raise ``_NotADevice`` for other kinds."""
    if isinstance(dev, bool):
        raise _NotADevice
    if isinstance(dev, int):
        # torch.device(1) needs an accelerator on CPU builds; an int means that CUDA ordinal.
        return _check_ordinal(dev)
    d = torch.device(dev) if isinstance(dev, str) else dev
    if not isinstance(d, torch.device):
        raise _NotADevice
    if d.type == "cpu":
        return None
    if d.type == "cuda":
        return _check_ordinal(_state.current if d.index is None else d.index)
    raise _NotADevice


def _tensors(obj: Any) -> Iterator[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, list | tuple):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


def _tag_all(obj: Any, idx: int) -> None:
    for t in _tensors(obj):
        setattr(t, _TAG, idx)


def _common_index(args: Any, kwargs: dict[str, Any]) -> int | None:
    """Return the device all tensor arguments share; raise PyTorch's mixed-device error if they don't."""
    first: int | None = None
    seen: list[int | None] = []
    for t in _tensors((args, kwargs)):
        idx = index_of(t)
        if idx is None and t.dim() == 0:
            continue  # CPU scalars mix with CUDA tensors in real PyTorch too
        if idx not in seen:
            seen.append(idx)
        if first is None:
            first = idx
    if len(seen) > 1:
        # Real TensorIterator names the accelerator device first, then the odd one out.
        cuda_first = sorted(seen, key=lambda i: i is None)
        raise RuntimeError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            f"{_name(cuda_first[0])} and {_name(cuda_first[1])}!"
        )
    return seen[0] if seen else None


def _move(t: torch.Tensor, dst: int | None, what: str, **cpu_kwargs: Any) -> torch.Tensor:
    """Return ``t`` on ``dst``: ``t`` itself when nothing changes, else a differentiable copy."""
    src = index_of(t)
    out = torch.Tensor.to(t, "cpu", **cpu_kwargs)
    if dst != src and out is t:
        # A real cross-device move makes a new tensor (autograd sees a copy); so must we.
        out = torch.Tensor.to(t, "cpu", **{**cpu_kwargs, "copy": True})
    if out is not t:
        _set_index(out, dst)
    if dst != src:
        _record(what, src, dst)
    return out


def _to(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    self, rest = args[0], list(args[1:])
    kw = dict(kwargs)
    target: Any = kw.pop("device", None)
    if rest and isinstance(rest[0], torch.Tensor):
        other = rest.pop(0)
        target, kw["dtype"] = _name(index_of(other)), other.dtype
    elif rest and not isinstance(rest[0], torch.dtype):
        target = rest.pop(0)
    if target is None:
        return func(*args, **kwargs)
    try:
        dst = parse_device(target)
    except _NotADevice:
        return func(*args, **kwargs)
    # What is left (dtype, non_blocking, copy, memory_format) applies on the CPU as it would on the device.
    parse_to: Any = torch._C._nn._parse_to  # its stubs know no "cpu"-first, keyword-only call
    parsed = parse_to("cpu", *rest, **{k: v for k, v in kw.items() if k != "copy"})
    extra: dict[str, Any] = {"non_blocking": parsed[2], "copy": bool(kw.get("copy", False))}
    if parsed[1] is not None:
        extra["dtype"] = parsed[1]
    if parsed[3] is not None:
        extra["memory_format"] = parsed[3]
    return _move(self, dst, "tensor", **extra)


def _cuda(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    device = args[1] if len(args) > 1 else kwargs.get("device")
    dst = _state.current if device is None else parse_device(device)
    if dst is None:
        raise RuntimeError(f"Invalid device, must be cuda device, got {device}")
    extra = {k: v for k, v in kwargs.items() if k in ("memory_format",)}
    return _move(args[0], dst, "tensor", **extra)


def _cpu(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return _move(args[0], None, "tensor", **kwargs)


def _get_device(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    idx = index_of(args[0])
    return -1 if idx is None else idx


def _numpy(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    idx = index_of(args[0])
    if idx is not None:
        raise TypeError(
            f"can't convert cuda:{idx} device type tensor to numpy. "
            "Use Tensor.cpu() to copy the tensor to host memory first."
        )
    return func(*args, **kwargs)


def _type(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    out = func(*args, **kwargs)
    if len(args) == 1 and not kwargs and isinstance(out, str) and index_of(args[0]) is not None:
        return out.replace("torch.", "torch.cuda.", 1)
    return out


_SUFFIX = re.compile(r", [a-z_]+=")


def _repr(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    text = func(*args, **kwargs)
    idx = index_of(args[0])
    if idx is None or not isinstance(text, str):
        return text
    # torch prints device first among the suffixes (dtype=, grad_fn=, requires_grad=...).
    match = _SUFFIX.search(text)
    at = match.start() if match else text.rstrip().rfind(")")
    return f"{text[:at]}, device='cuda:{idx}'{text[at:]}"


def _same_as_self(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # Indexing may use CPU index tensors; copy_ crosses devices; the result lives where self lives.
    out = func(*args, **kwargs)
    idx = index_of(args[0])
    if idx is not None and out is not args[0]:
        _tag_all(out, idx)
    return out


def _iter(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    rows = list(func(*args, **kwargs))
    idx = index_of(args[0])
    if idx is not None:
        _tag_all(rows, idx)
    return iter(rows)


def _pin_memory(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    # CPU builds cannot pin; a no-op keeps DataLoader(pin_memory=True)-style code working.
    return args[0]


def _is_pinned(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return False


_Handler = Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]
_METHODS: dict[Any, _Handler] = {
    torch.Tensor.to: _to,
    torch.Tensor.cuda: _cuda,
    torch.Tensor.cpu: _cpu,
    torch.Tensor.get_device: _get_device,
    torch.Tensor.numpy: _numpy,
    torch.Tensor.type: _type,
    torch.Tensor.__repr__: _repr,
    torch.Tensor.__getitem__: _same_as_self,
    torch.Tensor.__setitem__: _same_as_self,
    torch.Tensor.copy_: _same_as_self,
    torch.Tensor.__iter__: _iter,
    torch.Tensor.pin_memory: _pin_memory,
    torch.Tensor.is_pinned: _is_pinned,
}
# Called with tensors of several devices by design; never checked for mixing.
_UNCHECKED = {
    torch.Tensor.__reduce_ex__,
    torch.Tensor.__deepcopy__,
    torch.Tensor.__format__,
    torch._has_compatible_shallow_copy_type,  # Module._apply asks it about the old and the moved tensor
}


def _is_tensor_list(obj: Any) -> bool:
    return isinstance(obj, list | tuple) and bool(obj) and all(isinstance(t, torch.Tensor) for t in obj)


def _foreach(func: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run a ``torch._foreach_*`` op: the i-th tensors of its lists must share a device, not the whole lists.

    Optimizers group their tensors by device in C++ (``_group_tensors_by_device_and_dtype``), which sees the
    real CPU device only, so one call may hold parameters of several virtual devices; real PyTorch's per-tensor
    path accepts that too. Each output takes the device of its position.
    """
    values = (*args, *kwargs.values())
    lists = [v for v in values if _is_tensor_list(v)]
    scalars = [v for v in values if isinstance(v, torch.Tensor)]
    where = [_common_index(([lst[i] for lst in lists], scalars), {}) for i in range(len(lists[0]))] if lists else []
    out = func(*args, **kwargs)
    if _is_tensor_list(out) and len(out) == len(where):
        for t, idx in zip(out, where, strict=True):
            _set_index(t, idx)
    return out


def _property(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Answer a Tensor property read or write (``.device``, ``.is_cuda``, ``.grad``, ``.data`` ...)."""
    attr, op, self = func.__self__.__name__, func.__name__, args[0]
    idx = index_of(self) if isinstance(self, torch.Tensor) else None
    if op == "__set__":
        out = func(*args, **kwargs)
        if attr == "data":
            # Module._apply moves parameters with `param.data = moved`: the parameter follows its data.
            _set_index(self, index_of(args[1]))
        return out
    if op != "__get__":
        return func(*args, **kwargs)
    if attr == "device":
        return func(*args, **kwargs) if idx is None else torch.device("cuda", idx)
    if attr == "is_cuda":
        return idx is not None
    if attr == "is_cpu":
        return idx is None
    out = func(*args, **kwargs)
    if attr == "grad" and isinstance(out, torch.Tensor) and idx is not None and index_of(out) is None:
        # The autograd engine makes grads in C++, out of sight: they belong to the parameter's device.
        setattr(out, _TAG, idx)
    elif attr == "data" and isinstance(out, torch.Tensor):
        _set_index(out, idx)
    elif idx is not None and isinstance(out, torch.Tensor) and out is not self:
        setattr(out, _TAG, idx)  # .T, .mT, .real ...
    return out


class _VirtualCudaMode(TorchFunctionMode):
    """Route every torch call through the device bookkeeping."""

    def __torch_function__(
        self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
    ) -> Any:
        kwargs = kwargs or {}
        if type(func).__name__ == "method-wrapper":
            return _property(func, args, kwargs)
        handler = _METHODS.get(func)
        if handler is not None:
            return handler(func, args, kwargs)
        if func in _UNCHECKED:
            return func(*args, **kwargs)
        if getattr(func, "__name__", "").startswith("_foreach_"):
            return _foreach(func, args, kwargs)
        if "device" in kwargs and kwargs["device"] is not None:
            try:
                dst = parse_device(kwargs["device"])
            except _NotADevice:
                return func(*args, **kwargs)
            out = func(*args, **{**kwargs, "device": "cpu"})
            if dst is not None:
                _tag_all(out, dst)
            return out
        idx = _common_index(args, kwargs)
        out = func(*args, **kwargs)
        if idx is not None:
            _tag_all(out, idx)
        return out


# ---- torch.cuda stand-ins -------------------------------------------------------------------------------


def _is_available() -> bool:
    return True


def _device_count() -> int:
    return _state.count


def _current_device() -> int:
    return _state.current


def _set_device(device: Any) -> None:
    idx = parse_device(device)
    if idx is not None:
        _state.current = idx


def _device_index(device: Any = None) -> int:
    if device is None:
        return _state.current
    idx = parse_device(device)
    return _state.current if idx is None else idx


def _get_device_name(device: Any = None) -> str:
    _device_index(device)
    return DEVICE_NAME


def _get_device_properties(device: Any = None) -> VirtualDeviceProperties:
    _device_index(device)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return VirtualDeviceProperties(DEVICE_NAME, memory, os.cpu_count() or 1)


def _get_device_capability(device: Any = None) -> tuple[int, int]:
    _device_index(device)
    return (0, 0)


def _constant(name: str, value: Any) -> Callable[..., Any]:
    """Return a distinct function answering ``value`` (dynamo rejects one object under two torch names)."""

    def answer(*args: Any, **kwargs: Any) -> Any:
        return value

    answer.__name__ = answer.__qualname__ = name
    return answer


class _DeviceContext:
    """Stand-in for ``torch.cuda.device(i)``: make ``i`` current inside the block."""

    def __init__(self, device: Any) -> None:
        self.idx = None if device is None or (isinstance(device, int) and device < 0) else _device_index(device)
        self.prev = _state.current

    def __enter__(self) -> None:
        self.prev = _state.current
        if self.idx is not None:
            _state.current = self.idx

    def __exit__(self, *exc: object) -> None:
        _state.current = self.prev


_CUDA_FUNCTIONS: dict[str, Any] = {
    "is_available": _is_available,
    "device_count": _device_count,
    "current_device": _current_device,
    "set_device": _set_device,
    "get_device_name": _get_device_name,
    "get_device_properties": _get_device_properties,
    "get_device_capability": _get_device_capability,
    "synchronize": _constant("synchronize", None),
    "empty_cache": _constant("empty_cache", None),
    "init": _constant("init", None),
    "is_initialized": _constant("is_initialized", True),
    # Virtual devices draw random numbers from the CPU generator; seeding it here would change CPU streams.
    "manual_seed": _constant("manual_seed", None),
    "manual_seed_all": _constant("manual_seed_all", None),
    "seed": _constant("seed", None),
    "seed_all": _constant("seed_all", None),
    "memory_allocated": _constant("memory_allocated", 0),
    "max_memory_allocated": _constant("max_memory_allocated", 0),
    "memory_reserved": _constant("memory_reserved", 0),
    "max_memory_reserved": _constant("max_memory_reserved", 0),
    "reset_peak_memory_stats": _constant("reset_peak_memory_stats", None),
    "is_bf16_supported": _constant("is_bf16_supported", False),
    "device": _DeviceContext,
}


def _module_device(module: nn.Module) -> int | None:
    for t in (*module.parameters(), *module.buffers()):
        return index_of(t)
    return None


def _wrap_module_move(name: str, orig: Callable[..., Any]) -> Callable[..., Any]:
    def move(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        if args and isinstance(args[0], torch.Tensor):
            # Module.to(tensor) reads the tensor's real device in C++; pass its virtual one instead.
            kwargs.setdefault("dtype", args[0].dtype)
            args = (_name(index_of(args[0])), *args[1:])
        if args and isinstance(args[0], int) and not isinstance(args[0], bool):
            args = (f"cuda:{_check_ordinal(args[0])}", *args[1:])
        src = _module_device(self)
        with quiet():
            out = orig(self, *args, **kwargs)
        asked = name != "to" or (args and not isinstance(args[0], torch.dtype)) or "device" in kwargs
        if asked:
            _record(f"module {type(self).__name__}", src, _module_device(self))
        return out

    move.__name__ = move.__qualname__ = name
    move.__doc__ = orig.__doc__
    return move


def _parameter_new(orig: Any) -> Any:
    def new(cls: type, data: Any = None, requires_grad: bool = True) -> Any:
        param = orig(cls, data, requires_grad)
        # _make_subclass is not routed through the mode: carry the device over by hand.
        if isinstance(data, torch.Tensor) and index_of(data) is not None:
            setattr(param, _TAG, index_of(data))
        return param

    return staticmethod(new)


def _patch(owner: Any, name: str, value: Any) -> None:
    had = name in vars(owner)
    _state.saved.append((owner, name, had, vars(owner).get(name)))
    setattr(owner, name, value)


def enable(n_devices: int = 2) -> None:
    """Pretend ``n_devices`` CUDA devices exist in this process (CPU builds only; idempotent per count)."""
    from . import torch_dp

    if n_devices < 1:
        raise ValueError("n_devices must be at least 1")
    # Dynamo indexes torch.cuda's functions when first imported (optimizers import it): let it see the
    # real ones. Importing it starts no thread, so this stays fork-safe.
    import torch._dynamo

    if enabled():
        if n_devices == _state.count:
            return
        disable()
    _state.count, _state.current = n_devices, 0
    _state.log.clear()
    for name, value in _CUDA_FUNCTIONS.items():
        _patch(torch.cuda, name, value)
    for name in ("to", "cuda", "cpu"):
        _patch(nn.Module, name, _wrap_module_move(name, vars(nn.Module)[name]))
    _patch(nn.Parameter, "__new__", _parameter_new(nn.Parameter.__new__))
    for name, value in torch_dp.METHODS.items():
        _patch(nn.DataParallel, name, value)
    mode = _VirtualCudaMode()
    mode.__enter__()
    _state.mode = mode


def disable() -> None:
    """Undo ``enable``: real ``torch.cuda``, real DataParallel, no mode (tagged tensors read as CPU again)."""
    if _state.mode is None:
        return
    _state.mode.__exit__(None, None, None)
    _state.mode = None
    while _state.saved:
        owner, name, had, old = _state.saved.pop()
        if had:
            setattr(owner, name, old)
        else:
            delattr(owner, name)
    _state.count, _state.current = 0, 0
