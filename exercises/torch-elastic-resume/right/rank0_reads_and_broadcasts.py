"""Only rank 0 reads the checkpoint file; it sends what it read to the other ranks with broadcast_object_list."""

import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def load_checkpoint(path, rank):
    """Return the checkpoint dict (or None) on every rank; only rank 0 touches the file system."""
    box = [None]
    if rank == 0 and os.path.isfile(path):
        box[0] = torch.load(path, map_location="cpu", weights_only=True)
    dist.broadcast_object_list(box, src=0)
    return box[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt-dir")
    parser.add_argument("--out")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()

    torch.manual_seed(0)
    ddp = DistributedDataParallel(nn.Linear(4, 1))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)

    path = os.path.join(args.ckpt_dir, "state.pt")
    checkpoint = load_checkpoint(path, rank)
    first_epoch = 0
    if checkpoint is not None:
        ddp.module.load_state_dict(checkpoint["model"])
        opt.load_state_dict(checkpoint["opt"])
        first_epoch = checkpoint["next_epoch"]

    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(64, 4, generator=gen)
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, seed=0)  # rank and world size from the default group
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    loss_fn = nn.MSELoss()

    for epoch in range(first_epoch, 6):
        sampler.set_epoch(epoch)
        for inputs, targets in loader:
            opt.zero_grad(set_to_none=True)
            loss_fn(ddp(inputs), targets).backward()
            opt.step()
        if rank == 0:
            torch.save({"model": ddp.module.state_dict(), "opt": opt.state_dict(), "next_epoch": epoch + 1},
                       path + ".new")
            os.replace(path + ".new", path)
        dist.barrier()

    if rank == 0:
        torch.save(ddp.module.state_dict(), args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
