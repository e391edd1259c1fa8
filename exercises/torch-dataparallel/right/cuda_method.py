from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    # .cuda() with no index means the current device, cuda:0.
    return nn.DataParallel(model.cuda())
