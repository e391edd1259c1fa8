import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler, TensorDataset


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    # env:// rendezvous: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from the environment.
    assert int(os.environ["RANK"]) == rank
    dist.init_process_group(backend="nccl" if torch.cuda.is_available() else "gloo")
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(64, 4, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 3.0]).unsqueeze(1) + 0.5
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, shuffle=False)  # rank and world size from the default group

    torch.manual_seed(0)
    ddp = DistributedDataParallel(nn.Sequential(nn.Linear(4, 1))[0])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    mine = list(sampler)  # this rank's 32 indices
    for _ in range(40):
        for start in range(0, len(mine), 16):
            idx = mine[start : start + 16]
            opt.zero_grad()
            ((ddp(x[idx]) - y[idx]) ** 2).mean().backward()
            opt.step()
    result = dict(ddp.module.state_dict())
    dist.destroy_process_group()
    return result
