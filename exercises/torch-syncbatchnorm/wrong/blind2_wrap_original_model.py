from collections.abc import Callable

from torch import nn


def convert_bn(model: nn.Module) -> nn.Module:
    return nn.SyncBatchNorm.convert_sync_batchnorm(model)


def prepare(model: nn.Module, wrap: Callable[[nn.Module], nn.Module]) -> nn.Module:
    convert_bn(model)  # converts the layers inside model
    return wrap(model)
