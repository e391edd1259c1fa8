from collections.abc import Callable

from torch import nn


def _is_plain_bn(m: nn.Module) -> bool:
    return isinstance(m, nn.modules.batchnorm._BatchNorm) and not isinstance(m, nn.SyncBatchNorm)


def convert_bn(model: nn.Module) -> nn.Module:
    if _is_plain_bn(model):
        return nn.SyncBatchNorm.convert_sync_batchnorm(model)
    stack = [model]
    while stack:
        parent = stack.pop()
        for name, child in list(parent.named_children()):
            if _is_plain_bn(child):
                parent.add_module(name, nn.SyncBatchNorm.convert_sync_batchnorm(child))
            else:
                stack.append(child)
    return model


def prepare(model: nn.Module, wrap: Callable[[nn.Module], nn.Module]) -> nn.Module:
    model = convert_bn(model)
    model = wrap(model)
    return model
