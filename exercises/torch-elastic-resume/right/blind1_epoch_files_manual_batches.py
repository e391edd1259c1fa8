import argparse
import glob
import os
import re
import tempfile

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler, TensorDataset

EPOCHS = 6


def make_dataset() -> TensorDataset:
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
    return TensorDataset(x, y)


def latest_checkpoint(ckpt_dir: str):
    """Return (epoch, path) of the newest epoch_XX.pt in ckpt_dir, or None."""
    found = []
    for path in glob.glob(os.path.join(ckpt_dir, "epoch_*.pt")):
        m = re.fullmatch(r"epoch_(\d+)\.pt", os.path.basename(path))
        if m:
            found.append((int(m.group(1)), path))
    return max(found) if found else None


def main() -> None:
    """Train nn.Linear(4, 1) with DDP on the ranks torchrun started; survive a restart by resuming a checkpoint.

    Run as: torchrun --standalone --nproc-per-node 2 --max-restarts 1 submission.py --ckpt-dir DIR --out FILE
    """
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt-dir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = int(os.environ["RANK"])

    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    start_epoch = 0
    latest = latest_checkpoint(args.ckpt_dir)
    if latest is not None:
        saved_epoch, path = latest
        blob = torch.load(path, map_location="cpu")
        model.load_state_dict(blob["model"])
        optimizer.load_state_dict(blob["optimizer"])
        start_epoch = saved_epoch + 1

    ddp_model = DistributedDataParallel(model)
    dataset = make_dataset()
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    batch_size = 8

    for epoch in range(start_epoch, EPOCHS):
        sampler.set_epoch(epoch)
        indices = list(sampler)  # this rank's 32 shuffled indices for this epoch
        for start in range(0, len(indices), batch_size):
            x, y = dataset[indices[start:start + batch_size]]
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(ddp_model(x), y)
            loss.backward()
            optimizer.step()

        if rank == 0:
            fd, tmp_name = tempfile.mkstemp(dir=args.ckpt_dir, suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, fh)
            os.replace(tmp_name, os.path.join(args.ckpt_dir, f"epoch_{epoch:02d}.pt"))
        dist.barrier()

    if rank == 0:
        torch.save(model.state_dict(), args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
