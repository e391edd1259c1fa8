"""Checkpoint after every optimizer step and resume in the middle of an epoch, skipping the batches already done."""

import argparse
import itertools
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

EPOCHS = 6


def parse_args():
    parser = argparse.ArgumentParser(description="elastic DDP training")
    parser.add_argument("--ckpt-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    return parser.parse_args()


def save_atomically(state, path: Path) -> None:
    tmp = path.with_suffix(".partial")
    torch.save(state, tmp)
    tmp.replace(path)


def main():
    args = parse_args()
    dist.init_process_group(backend="gloo", init_method="env://")
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])

    torch.manual_seed(0)
    net = nn.Linear(4, 1)
    sgd = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)

    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, seed=0)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    steps_per_epoch = len(loader)

    ckpt = args.ckpt_dir / "latest.pt"
    step = 0  # optimizer steps done so far, over all epochs
    if ckpt.exists():
        saved = torch.load(ckpt)
        net.load_state_dict(saved["net"])
        sgd.load_state_dict(saved["sgd"])
        step = saved["step"]

    model = DDP(net)
    while step < EPOCHS * steps_per_epoch:
        epoch, done_in_epoch = divmod(step, steps_per_epoch)
        sampler.set_epoch(epoch)
        for xb, yb in itertools.islice(loader, done_in_epoch, None):
            sgd.zero_grad()
            F.mse_loss(model(xb), yb).backward()
            sgd.step()
            step += 1
            if rank == 0:
                save_atomically({"net": net.state_dict(), "sgd": sgd.state_dict(), "step": step}, ckpt)
            dist.barrier()

    if rank == 0:
        torch.save(net.state_dict(), args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
