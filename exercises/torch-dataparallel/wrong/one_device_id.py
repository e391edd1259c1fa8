from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    return nn.DataParallel(model.cuda(), device_ids=[0])  # a "parallel" model on one GPU
