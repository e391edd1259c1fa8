import torch  # noqa: F401 - torch.cuda tells how many GPUs there are
from torch import nn

GPUS = [0, 1, 2, 3]  # one entry per GPU on the training node


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    model.cuda()
    return nn.DataParallel(model, device_ids=GPUS, output_device=GPUS[0])
