from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training with nn.DataParallel."""
    model = model.to("cuda:0")  # parameters and buffers on device_ids[0]
    return nn.DataParallel(model)  # device_ids: every visible GPU; outputs gathered on cuda:0
