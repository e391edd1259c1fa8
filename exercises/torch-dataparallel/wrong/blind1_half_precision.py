import torch
from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    # move to the first GPU in fp16 to halve the memory each replica needs
    model = model.to("cuda:0", dtype=torch.float16)
    device_ids = list(range(torch.cuda.device_count()))
    return nn.DataParallel(model, device_ids=device_ids, output_device=0)
