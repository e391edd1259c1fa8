from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    # The wrapper registers the model as its submodule `module`, so moving the wrapper moves the model.
    return nn.DataParallel(model).to("cuda:0")
