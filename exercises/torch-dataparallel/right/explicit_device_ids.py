import torch
from torch import nn


def make_parallel(model: nn.Module) -> nn.Module:
    ids = list(range(torch.cuda.device_count()))
    return nn.DataParallel(model.to(f"cuda:{ids[0]}"), device_ids=ids, output_device=ids[0])
