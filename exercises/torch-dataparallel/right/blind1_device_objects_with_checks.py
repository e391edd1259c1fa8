from itertools import chain

import torch
from torch import nn


def _all_on(module: nn.Module, device: torch.device) -> bool:
    return all(t.device == device for t in chain(module.parameters(), module.buffers()))


def make_parallel(model: nn.Module) -> nn.DataParallel:
    """Return `model` ready for single-process multi-GPU training."""
    devices: list[torch.device] = [torch.device(f"cuda:{i}") for i in range(torch.cuda.device_count())]
    primary = devices[0]

    model.to(primary)  # Module.to moves parameters and buffers in place
    if not _all_on(model, primary):
        raise RuntimeError(f"model is not fully on {primary}")

    dp = nn.DataParallel(model, device_ids=devices, output_device=primary)
    assert dp.module is model
    print(f"[make_parallel] device_ids={dp.device_ids} output_device={dp.output_device}")
    return dp
