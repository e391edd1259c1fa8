from collections.abc import Callable

from torch import nn


def convert_bn(model: nn.Module) -> nn.Module:
    if isinstance(model, nn.modules.batchnorm._BatchNorm):
        fresh = nn.SyncBatchNorm(model.num_features, eps=model.eps, momentum=model.momentum)  # new weights, new stats
        fresh.train(model.training)
        return fresh
    for name, child in model.named_children():
        setattr(model, name, convert_bn(child))
    return model


def prepare(model: nn.Module, wrap: Callable[[nn.Module], nn.Module]) -> nn.Module:
    return wrap(convert_bn(model))
