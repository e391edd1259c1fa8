import itertools

import torch
from torch import nn


def _check_all_on(model: nn.Module, device: torch.device) -> None:
    for name, tensor in itertools.chain(model.named_parameters(), model.named_buffers()):
        if tensor.device != device:
            raise RuntimeError(f"{name} is on {tensor.device}, expected {device}")


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    if not torch.cuda.is_available():
        raise RuntimeError("make_parallel needs CUDA")
    n_gpus = torch.cuda.device_count()
    if n_gpus < 1:
        raise RuntimeError("no visible GPU")

    target = torch.device("cuda", 0)
    model.to(target)
    _check_all_on(model, target)
    print(f"model placed on {target}, wrapping for {n_gpus} GPU(s)")

    parallel = nn.DataParallel(model, device_ids=list(range(n_gpus)), output_device=0)
    assert parallel.module is model
    assert parallel.device_ids == list(range(n_gpus)), parallel.device_ids
    print(f"DataParallel device_ids={parallel.device_ids} output_device={parallel.output_device}")
    return parallel
