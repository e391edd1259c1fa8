import copy

import torch
from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    # Don't mutate the caller's module: move a copy to the GPU instead.
    gpu_model = copy.deepcopy(model).to("cuda:0")
    device_ids = list(range(torch.cuda.device_count()))
    return nn.DataParallel(gpu_model, device_ids=device_ids, output_device=0)
