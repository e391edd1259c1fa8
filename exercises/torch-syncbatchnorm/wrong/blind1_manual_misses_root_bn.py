from collections.abc import Callable

from torch import nn

_BN_TYPES = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


def convert_bn(model: nn.Module) -> nn.Module:
    """Return the model with every BatchNorm1d/2d/3d layer, at any depth, replaced by nn.SyncBatchNorm.

    Keep the trained weights, biases and running statistics. `model` may itself be a BatchNorm layer.
    """
    for name, child in model.named_children():
        if isinstance(child, _BN_TYPES):
            setattr(model, name, nn.SyncBatchNorm.convert_sync_batchnorm(child))
        else:
            convert_bn(child)
    return model


def prepare(model: nn.Module, wrap: Callable[[nn.Module], nn.Module]) -> nn.Module:
    """Get `model` ready for DistributedDataParallel: convert its BatchNorm layers, then call wrap exactly once
    with the converted model and return what wrap returns.
    """
    converted = convert_bn(model)
    return wrap(converted)

