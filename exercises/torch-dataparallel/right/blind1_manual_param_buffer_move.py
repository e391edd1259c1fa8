import torch
from torch import nn


def _move_to(module: nn.Module, device: torch.device) -> None:
    """Move every parameter and buffer of `module` (recursively) in place, keeping Parameter objects."""
    for sub in module.modules():
        for p in sub.parameters(recurse=False):
            p.data = p.data.to(device)
        for name, buf in list(sub.named_buffers(recurse=False)):
            sub._buffers[name] = buf.to(device)


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    device_ids = [i for i in range(torch.cuda.device_count())]
    _move_to(model, torch.device("cuda", device_ids[0]))
    return nn.DataParallel(model, device_ids, 0)
