import torch
from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    model = model.to("cuda:0")
    device_ids = list(range(torch.cuda.device_count()))
    # batch is (batch, features): split it across the GPUs along dim=1
    return nn.DataParallel(model, device_ids=device_ids, output_device=0, dim=1)
