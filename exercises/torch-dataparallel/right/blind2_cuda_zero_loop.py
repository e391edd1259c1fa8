import torch
from torch import nn


def _visible_gpu_ids():
    ids = []
    i = 0
    while i < torch.cuda.device_count():
        ids.append(i)
        i += 1
    return ids


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    gpu_ids = _visible_gpu_ids()
    model = model.cuda(gpu_ids[0])
    parallel = torch.nn.parallel.DataParallel(model, gpu_ids, gpu_ids[0])
    return parallel
