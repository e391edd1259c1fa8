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
    """Train nn.Linear(4, 1) with DDP on the ranks torchrun started; survive a restart by resuming a checkpoint.

    Run as: torchrun --standalone --nproc-per-node 2 --max-restarts 1 submission.py --ckpt-dir DIR --out FILE
    """
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt-dir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    # TODO: join the process group torchrun prepared, build the model and the optimizer, resume from
    # args.ckpt_dir if a checkpoint is there, train to EPOCHS saving a checkpoint every epoch, write the
    # final weights to args.out on rank 0.
    raise NotImplementedError("main is not written yet")


if __name__ == "__main__":
    main()
