import torch
from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    device = torch.device("cuda", 0)
    return nn.DataParallel(model.to(device))
