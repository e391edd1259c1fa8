from collections.abc import Callable

from torch import nn


def convert_bn(model: nn.Module) -> nn.Module:
    if isinstance(model, nn.modules.batchnorm._BatchNorm):
        return nn.SyncBatchNorm.convert_sync_batchnorm(model)
    for name, child in model.named_children():  # only the direct children
        if isinstance(child, nn.modules.batchnorm._BatchNorm):
            setattr(model, name, nn.SyncBatchNorm.convert_sync_batchnorm(child))
    return model


def prepare(model: nn.Module, wrap: Callable[[nn.Module], nn.Module]) -> nn.Module:
    return wrap(convert_bn(model))
