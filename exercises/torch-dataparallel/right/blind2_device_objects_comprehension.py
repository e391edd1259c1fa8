import torch
from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    devices = [torch.device(f"cuda:{i}") for i in range(torch.cuda.device_count())]
    wrapped = nn.DataParallel(model, device_ids=devices, output_device=devices[0])
    wrapped.to(devices[0])  # after wrapping: moves wrapped.module, which is `model`
    return wrapped
