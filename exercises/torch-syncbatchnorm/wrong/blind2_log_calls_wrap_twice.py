import logging
from collections.abc import Callable

from torch import nn

log = logging.getLogger(__name__)


def convert_bn(model: nn.Module) -> nn.Module:
    return nn.SyncBatchNorm.convert_sync_batchnorm(model)


def prepare(model: nn.Module, wrap: Callable[[nn.Module], nn.Module]) -> nn.Module:
    converted = convert_bn(model)
    n_sync = sum(isinstance(m, nn.SyncBatchNorm) for m in converted.modules())
    log.info("converted %d BatchNorm layers; wrapper: %s", n_sync, type(wrap(converted)).__name__)
    return wrap(converted)
