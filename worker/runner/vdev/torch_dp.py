"""Virtual scatter, replicate, parallel_apply and gather for ``nn.DataParallel`` on virtual CUDA devices.

Contract: ``METHODS`` replaces the four same-named ``DataParallel`` methods while ``torch_cuda`` is enabled;
the real ``__init__`` and ``forward`` (device_ids defaults, the parameters-on-device_ids[0] check) run
unchanged. Semantics follow real DataParallel on N GPUs: inputs are cut along ``dim`` with ``torch.chunk``
(so fewer chunks than devices when the batch is small), chunk i goes to ``device_ids[i]``, one replica per
chunk runs the module (sequentially, not in threads), outputs are concatenated on ``output_device``.
Replicas reach the original parameters through differentiable copies, so ``backward`` sums the chunk
gradients into the original ``.grad``; replica 0 shares the original buffers (BatchNorm statistics follow
device_ids[0]'s chunk, as on GPUs).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch._utils import ExceptionWrapper

from . import torch_cuda


def _to(t: torch.Tensor, device: int) -> torch.Tensor:
    return t.to("cpu" if device < 0 else f"cuda:{device}")


def _scatter_one(obj: Any, devices: Sequence[int], dim: int) -> list[Any]:
    """Return one piece of ``obj`` per chunk: tensors are chunked, containers zipped, others repeated."""
    if isinstance(obj, torch.Tensor):
        return [_to(c, d) for c, d in zip(torch.chunk(obj, len(devices), dim), devices, strict=False)]
    if isinstance(obj, tuple) and hasattr(obj, "_fields") and obj:
        return [type(obj)(*parts) for parts in zip(*(_scatter_one(o, devices, dim) for o in obj), strict=False)]
    if isinstance(obj, tuple) and obj:
        return list(zip(*(_scatter_one(o, devices, dim) for o in obj), strict=False))
    if isinstance(obj, list) and obj:
        return [list(parts) for parts in zip(*(_scatter_one(o, devices, dim) for o in obj), strict=False)]
    if isinstance(obj, dict) and obj:
        return [
            type(obj)(parts) for parts in zip(*(_scatter_one(kv, devices, dim) for kv in obj.items()), strict=False)
        ]
    return [obj for _ in devices]


def scatter(
    self: nn.DataParallel, inputs: tuple[Any, ...], kwargs: dict[str, Any] | None, device_ids: Sequence[int]
) -> tuple[tuple[Any, ...], tuple[dict[str, Any], ...]]:
    """Cut inputs and kwargs into per-device pieces, padding the shorter list like the real scatter_kwargs."""
    with torch_cuda.quiet():
        pieces: list[Any] = _scatter_one(inputs, device_ids, self.dim) if inputs else []
        kw_pieces: list[Any] = _scatter_one(kwargs, device_ids, self.dim) if kwargs else []
    pieces += [() for _ in range(len(kw_pieces) - len(pieces))]
    kw_pieces += [{} for _ in range(len(pieces) - len(kw_pieces))]
    return tuple(pieces), tuple(kw_pieces)


def replicate(self: nn.DataParallel, module: nn.Module, device_ids: Sequence[int]) -> list[nn.Module]:
    """Return one replica of ``module`` per device, wired to the original parameters through autograd."""
    originals = list(module.modules())
    replicas: list[nn.Module] = []
    with torch_cuda.quiet():
        for device in device_ids:
            copies = {id(m): m._replicate_for_data_parallel() for m in originals}
            for m in originals:
                r = copies[id(m)]
                for key, sub in m._modules.items():
                    r._modules[key] = None if sub is None else copies[id(sub)]
                for key, p in m._parameters.items():
                    # A plain attribute, not a Parameter: replicas own no parameters, as in real DataParallel.
                    source = p if p is None or torch.is_grad_enabled() else p.detach()
                    setattr(r, key, None if source is None else source.to(f"cuda:{device}", copy=True))
                for key, b in m._buffers.items():
                    if b is not None and device != device_ids[0]:
                        r._buffers[key] = b.detach().to(f"cuda:{device}", copy=True)
            replicas.append(copies[id(module)])
    return replicas


def parallel_apply(
    self: nn.DataParallel, replicas: Sequence[nn.Module], inputs: Sequence[Any], kwargs: Any
) -> list[Any]:
    """Run each replica on its piece, one after the other, with its device current."""
    outputs = []
    for i, (replica, args, kw, device) in enumerate(zip(replicas, inputs, kwargs, self.device_ids, strict=False)):
        args = args if isinstance(args, list | tuple) else (args,)
        try:
            with torch.cuda.device(device):
                outputs.append(replica(*args, **kw))
        except Exception:
            # The real wrapper: "Caught ValueError in replica 1 on device 1.\nOriginal Traceback ..."
            ExceptionWrapper(where=f"in replica {i} on device {device}").reraise()
    return outputs


def _gather_one(outputs: list[Any], device: int, dim: int) -> Any:
    first = outputs[0]
    if isinstance(first, torch.Tensor):
        if all(o.dim() == 0 for o in outputs):
            warnings.warn(
                "Was asked to gather along dimension 0, but all input tensors were scalars; "
                "will instead unsqueeze and return a vector.",
                stacklevel=2,
            )
            outputs = [o.unsqueeze(0) for o in outputs]
        return torch.cat([_to(o, device) for o in outputs], dim)
    if first is None:
        return None
    if isinstance(first, dict):
        return type(first)((k, _gather_one([o[k] for o in outputs], device, dim)) for k in first)
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(_gather_one(list(parts), device, dim) for parts in zip(*outputs, strict=False)))
    if isinstance(first, list | tuple):
        return type(first)(_gather_one(list(parts), device, dim) for parts in zip(*outputs, strict=False))
    return first


def gather(self: nn.DataParallel, outputs: list[Any], output_device: int | torch.device) -> Any:
    """Concatenate replica outputs along ``dim`` on ``output_device`` (-1 or cpu: the CPU)."""
    device = (
        output_device
        if isinstance(output_device, int)
        else (-1 if output_device.type == "cpu" else (output_device.index or 0))
    )
    with torch_cuda.quiet():
        return _gather_one(outputs, device, self.dim)


METHODS: dict[str, Any] = {
    "scatter": scatter,
    "replicate": replicate,
    "parallel_apply": parallel_apply,
    "gather": gather,
}
