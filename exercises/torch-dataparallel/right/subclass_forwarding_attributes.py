from torch import nn


class Parallel(nn.DataParallel):
    """A genuine DataParallel that also lets `wrapped.head` reach the inner model's attributes."""

    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.module, name)


def make_parallel(model: nn.Module) -> nn.Module:
    return Parallel(model.cuda(0))
