import torch
from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    first_gpu = torch.device("cuda", 0)
    model.to(first_gpu)  # nn.Module.to moves in place
    device_ids = list(range(torch.cuda.device_count()))
    return nn.DataParallel(model, device_ids=device_ids, output_device=0)
