"""Keep one file per epoch, saved from the DDP wrapper; strip its 'module.' prefix when a restart loads the newest."""

import argparse
import glob
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def newest_checkpoint(folder):
    files = glob.glob(os.path.join(folder, "epoch-*.pt"))
    return max(files, key=lambda f: int(os.path.basename(f)[6:-3]), default=None)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt-dir", dest="ckpt_dir")
    parser.add_argument("--out", dest="out")
    args = parser.parse_args()

    dist.init_process_group(backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optim = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    start = 0
    found = newest_checkpoint(args.ckpt_dir)
    if found:
        state = torch.load(found)
        consume_prefix_in_state_dict_if_present(state["model"], "module.")
        model.load_state_dict(state["model"])
        optim.load_state_dict(state["optim"])
        start = state["epoch"] + 1
    wrapped = DistributedDataParallel(model)

    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
    data = TensorDataset(x, y)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=0)

    for epoch in range(start, 6):
        sampler.set_epoch(epoch)
        for xb, yb in DataLoader(data, batch_size=8, sampler=sampler):
            loss = ((wrapped(xb) - yb) ** 2).mean()
            optim.zero_grad()
            loss.backward()
            optim.step()
        if rank == 0:
            target = os.path.join(args.ckpt_dir, f"epoch-{epoch}.pt")
            torch.save({"model": wrapped.state_dict(), "optim": optim.state_dict(), "epoch": epoch}, target + ".tmp")
            os.rename(target + ".tmp", target)
        dist.barrier()

    if rank == 0:
        torch.save(wrapped.module.state_dict(), args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
