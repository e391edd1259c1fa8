from collections.abc import Callable

from torch import nn

_BN_TYPES = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


def _to_sync(bn: nn.Module) -> nn.SyncBatchNorm:
    sync = nn.SyncBatchNorm(bn.num_features, bn.eps, bn.momentum, bn.affine, bn.track_running_stats)
    if bn.affine:
        sync.weight = bn.weight
        sync.bias = bn.bias
    sync.running_mean = bn.running_mean
    sync.running_var = bn.running_var
    sync.training = bn.training
    return sync


def _convert(module: nn.Module) -> nn.Module:
    if isinstance(module, _BN_TYPES):
        return _to_sync(module)
    for name, child in module.named_children():
        module.add_module(name, _convert(child))
    return module


def convert_bn(model: nn.Module) -> nn.Module:
    return _convert(model)


def prepare(model: nn.Module, wrap: Callable[[nn.Module], nn.Module]) -> nn.Module:
    converted = convert_bn(model)
    return wrap(converted)
