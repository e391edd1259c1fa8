import torch
from torch import nn


class DataParallel(nn.Module):
    """Has the attributes of a DataParallel, but runs the whole batch on one GPU."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.device_ids = list(range(torch.cuda.device_count()))
        self.output_device = 0

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)


def make_parallel(model: nn.Module) -> nn.Module:
    return DataParallel(model.cuda())
