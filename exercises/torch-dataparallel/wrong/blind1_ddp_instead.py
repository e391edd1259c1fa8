import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    # PyTorch recommends DistributedDataParallel over DataParallel, even on one machine.
    model = model.to("cuda:0")
    device_ids = list(range(torch.cuda.device_count()))
    return DistributedDataParallel(model, device_ids=device_ids, output_device=0)
