import torch
from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    n_gpus = torch.cuda.device_count()
    model = model.to("cuda:0")
    # every visible GPU, highest index first; outputs gathered on cuda:0
    device_ids = list(reversed(range(n_gpus)))
    return nn.DataParallel(model, device_ids=device_ids, output_device=0)
