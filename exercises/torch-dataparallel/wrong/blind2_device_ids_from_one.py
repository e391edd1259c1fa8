import torch
from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    n_gpus = torch.cuda.device_count()
    gpu_ids = list(range(1, n_gpus + 1))  # GPU 1 .. GPU n
    model = model.to("cuda:0")
    return nn.DataParallel(model, device_ids=gpu_ids, output_device=0)
