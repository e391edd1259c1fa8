import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import TensorDataset

FEATURES, CLASSES = 16, 4
BATCH = 32  # samples per step on one device
LR = 0.005  # tuned for BATCH samples per step
EPOCHS = 6


def make_data() -> tuple[TensorDataset, TensorDataset]:
    """1024 training and 1024 validation samples from 4 overlapping Gaussian clusters: the same on every call."""
    g = torch.Generator().manual_seed(2024)
    centers = torch.randn(CLASSES, FEATURES, generator=g)
    y = torch.randint(0, CLASSES, (2048,), generator=g)
    x = centers[y] + torch.randn(2048, FEATURES, generator=g)
    return TensorDataset(x[:1024], y[:1024]), TensorDataset(x[1024:], y[1024:])


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))


def train(rank: int, world_size: int, checkpoint_path: str) -> dict[str, torch.Tensor]:
    # env:// rendezvous: RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT come from the environment.
    dist.init_process_group(backend="gloo")
    rank, world_size = dist.get_rank(), dist.get_world_size()
    assert rank == int(os.environ["RANK"])

    torch.manual_seed(rank)  # different on each rank: DDP broadcasts rank 0's weights when it wraps
    ddp = DistributedDataParallel(build_model())
    (x, y), (vx, vy) = (d.tensors for d in make_data())
    opt = torch.optim.SGD(ddp.parameters(), lr=LR * world_size)  # global batch = world_size * BATCH

    for epoch in range(EPOCHS):
        # The same permutation on every rank (seeded by the epoch); each rank takes every world_size-th index.
        order = torch.randperm(len(x), generator=torch.Generator().manual_seed(1000 + epoch))
        mine = order[rank::world_size]
        ddp.train()
        for start in range(0, len(mine), BATCH):
            idx = mine[start : start + BATCH]
            opt.zero_grad()
            nn.functional.cross_entropy(ddp(x[idx]), y[idx]).backward()
            opt.step()

    plain = ddp.module
    plain.eval()
    with torch.no_grad():
        shard = slice(rank, None, world_size)
        hits = (plain(vx[shard]).argmax(1) == vy[shard]).sum()
    counts = torch.stack([hits.double(), torch.tensor(float(len(vy[shard])), dtype=torch.float64)])
    dist.all_reduce(counts)  # SUM is the default op
    if dist.get_rank() == 0:
        torch.save(plain.state_dict(), checkpoint_path)
    dist.barrier()
    dist.destroy_process_group()
    return {"val_accuracy": counts[0] / counts[1]}
