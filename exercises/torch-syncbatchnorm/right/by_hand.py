from collections.abc import Callable

from torch import nn


def convert_bn(module: nn.Module) -> nn.Module:
    """Recursive conversion by hand: same sizes and settings, state copied with load_state_dict."""
    if isinstance(module, nn.BatchNorm1d | nn.BatchNorm2d | nn.BatchNorm3d):
        sync = nn.SyncBatchNorm(
            module.num_features, module.eps, module.momentum, module.affine, module.track_running_stats
        )
        sync.load_state_dict(module.state_dict())
        sync.train(module.training)
        return sync
    for name, child in list(module.named_children()):
        setattr(module, name, convert_bn(child))
    return module


def prepare(model: nn.Module, wrap: Callable[[nn.Module], nn.Module]) -> nn.Module:
    converted = convert_bn(model)
    wrapped = wrap(converted)
    return wrapped
