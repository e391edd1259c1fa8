import torch
from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    model.to("cuda:0")
    nn.DataParallel(model, device_ids=list(range(torch.cuda.device_count())), output_device=0)
    return model
