import torch
from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    # BatchNorm statistics have to be computed over the whole batch, not per GPU
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = model.to("cuda:0")
    return nn.DataParallel(model, device_ids=list(range(torch.cuda.device_count())), output_device=0)
