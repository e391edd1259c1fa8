import torch
from torch import nn


class TrainingDataParallel(nn.DataParallel):
    """DataParallel that also records how many GPUs it splits each batch over."""

    def __init__(self, module: nn.Module, **kwargs):
        super().__init__(module, **kwargs)
        self.n_replicas = len(self.device_ids)

    def forward(self, *inputs, **kwargs):
        return super().forward(*inputs, **kwargs)


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    model.to("cuda")
    return TrainingDataParallel(model, device_ids=list(range(torch.cuda.device_count())), output_device=0)
