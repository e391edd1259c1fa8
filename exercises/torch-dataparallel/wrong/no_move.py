from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    return nn.DataParallel(model)  # parameters stay on the CPU
