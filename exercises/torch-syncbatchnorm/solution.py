from collections.abc import Callable

from torch import nn


def convert_bn(model: nn.Module) -> nn.Module:
    """Return `model` with every BatchNorm*d layer, at any depth, replaced by a SyncBatchNorm."""
    # convert_sync_batchnorm walks all submodules, reuses the trained weights and running statistics, and
    # returns a NEW module when `model` itself is a BatchNorm layer: always use its return value.
    return nn.SyncBatchNorm.convert_sync_batchnorm(model)


def prepare(model: nn.Module, wrap: Callable[[nn.Module], nn.Module]) -> nn.Module:
    """Convert first, then wrap (on GPUs: wrap = partial(DistributedDataParallel, device_ids=[rank]))."""
    model = convert_bn(model)
    return wrap(model)
