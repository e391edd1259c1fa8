import torch  # noqa: F401 - torch.cuda tells how many GPUs there are
from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training.

    The result must be an nn.DataParallel that uses every visible GPU, whose wrapped model has all its
    parameters and buffers on the first GPU (device_ids[0], i.e. cuda:0), so that a forward pass on a
    batch placed on cuda:0 runs on all GPUs and returns its output on cuda:0.
    """
    # TODO: place the model and wrap it.
    raise NotImplementedError("make_parallel is not written yet")
