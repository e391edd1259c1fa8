from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    model.to("cuda")  # Module.to moves in place and returns the same module
    return nn.DataParallel(model)
