import torch  # noqa: F401 - torch.cuda tells how many GPUs there are
from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    # Without device_ids DataParallel takes every visible GPU and gathers on the first one.
    # .to() on the wrapper moves its submodule `module`, i.e. the model itself, and returns the wrapper.
    return nn.DataParallel(model).to("cuda:0")
