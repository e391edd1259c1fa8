from collections.abc import Callable

from torch import nn

_BN_TYPES = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


def convert_bn(model: nn.Module) -> nn.Module:
    """Return the model with every BatchNorm1d/2d/3d layer, at any depth, replaced by nn.SyncBatchNorm.

    Keep the trained weights, biases and running statistics. `model` may itself be a BatchNorm layer.
    """
    if isinstance(model, _BN_TYPES):
        return nn.SyncBatchNorm.convert_sync_batchnorm(model)

    # Collect first, then replace: never mutate the module tree while iterating over it.
    targets = [name for name, m in model.named_modules() if isinstance(m, _BN_TYPES)]
    for full_name in targets:
        parent_name, _, leaf = full_name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        bn = getattr(parent, leaf)
        parent.add_module(leaf, nn.SyncBatchNorm.convert_sync_batchnorm(bn))
    print(f"convert_bn: replaced {len(targets)} BatchNorm layer(s): {targets}")
    return model


def prepare(model: nn.Module, wrap: Callable[[nn.Module], nn.Module]) -> nn.Module:
    """Get `model` ready for DistributedDataParallel: convert its BatchNorm layers, then call wrap exactly once
    with the converted model and return what wrap returns.
    """
    return wrap(convert_bn(model))
