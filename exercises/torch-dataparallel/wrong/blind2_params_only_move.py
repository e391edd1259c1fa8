import torch
from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    device = torch.device("cuda", 0)
    for param in model.parameters():
        param.data = param.data.to(device)
    device_ids = list(range(torch.cuda.device_count()))
    return nn.DataParallel(model, device_ids=device_ids, output_device=0)
