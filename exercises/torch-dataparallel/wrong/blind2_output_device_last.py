import torch
from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    n_gpus = torch.cuda.device_count()
    model = model.to("cuda:0")
    # cuda:0 already holds the master weights, so collect the outputs on the other end
    return nn.DataParallel(model, device_ids=list(range(n_gpus)), output_device=n_gpus - 1)
