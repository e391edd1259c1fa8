from collections.abc import Callable

from torch import nn


def convert_bn(model: nn.Module) -> nn.Module:
    nn.SyncBatchNorm.convert_sync_batchnorm(model)  # its return value is dropped
    return model


def prepare(model: nn.Module, wrap: Callable[[nn.Module], nn.Module]) -> nn.Module:
    return wrap(convert_bn(model))
