from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    return nn.DataParallel(model.to("cuda:1"))  # device_ids[0] is 0, not 1
