import torch
from torch import nn


class AutoDeviceDataParallel(nn.DataParallel):
    """DataParallel that also accepts inputs which are not on cuda:0 yet."""

    def forward(self, *inputs, **kwargs):
        inputs = tuple(t.to(self.src_device_obj) if torch.is_tensor(t) else t for t in inputs)
        return self.module(*inputs, **kwargs)


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    model = model.to("cuda:0")
    return AutoDeviceDataParallel(model, device_ids=list(range(torch.cuda.device_count())), output_device=0)
