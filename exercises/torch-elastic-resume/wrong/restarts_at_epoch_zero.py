import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

EPOCHS = 6


def make_dataset() -> TensorDataset:
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
    return TensorDataset(x, y)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt-dir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    dist.init_process_group("gloo")  # env://: torchrun set RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT
    rank, world_size = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    # A restarted worker is a new process: everything it knows of the run so far is in the checkpoint.
    path = os.path.join(args.ckpt_dir, "checkpoint.pt")
    start_epoch = 0
    if os.path.exists(path):
        checkpoint = torch.load(path, map_location="cpu")
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])  # SGD's momentum buffers

    ddp_model = DistributedDataParallel(model)
    data = make_dataset()
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=8, sampler=sampler)

    for epoch in range(start_epoch, EPOCHS):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(ddp_model(xb), yb).backward()
            optimizer.step()
        if rank == 0:
            # Write a temporary file and rename it: a worker killed while saving leaves the old checkpoint whole.
            state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
            torch.save(state, path + ".tmp")
            os.replace(path + ".tmp", path)
        dist.barrier()  # no rank starts the next epoch before the checkpoint is on disk

    if rank == 0:
        torch.save(model.state_dict(), args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
