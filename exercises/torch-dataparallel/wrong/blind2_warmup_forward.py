import torch
from torch import nn


def _input_width(model: nn.Module):
    for m in model.modules():
        if isinstance(m, nn.Linear):
            return m.in_features
    return None


def make_parallel(model: nn.Module) -> nn.Module:
    """Return `model` ready for single-process multi-GPU training."""
    model = model.to("cuda:0")

    # warm-up pass to make sure the weights ended up where the inputs are
    width = _input_width(model)
    if width is not None:
        with torch.no_grad():
            out = model(torch.randn(8, width, device="cuda:0"))
        print("warm-up ok:", tuple(out.shape), out.device)

    return nn.DataParallel(model, device_ids=list(range(torch.cuda.device_count())), output_device=0)
