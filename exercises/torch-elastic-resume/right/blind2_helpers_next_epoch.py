import argparse
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

EPOCHS = 6
CKPT_NAME = "resume.ckpt"


def make_dataset() -> TensorDataset:
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
    return TensorDataset(x, y)


def save_checkpoint(path: str, model: nn.Module, optimizer: torch.optim.Optimizer, next_epoch: int) -> None:
    """Atomic save, by rank 0 only; every rank waits at the barrier afterwards."""
    if dist.get_rank() == 0:
        tmp = f"{path}.writing"
        torch.save({"model": model.state_dict(), "optim": optimizer.state_dict(), "next_epoch": next_epoch}, tmp)
        os.replace(tmp, path)
    dist.barrier()


def load_checkpoint(path: str, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Restore model and optimizer on this rank; return the epoch to start with (0 when there is no checkpoint)."""
    if not os.path.exists(path):
        return 0
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optim"])
    return int(state["next_epoch"])


def main() -> None:
    """Train nn.Linear(4, 1) with DDP on the ranks torchrun started; survive a restart by resuming a checkpoint.

    Run as: torchrun --standalone --nproc-per-node 2 --max-restarts 1 submission.py --ckpt-dir DIR --out FILE
    """
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt-dir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    ckpt_path = os.path.join(args.ckpt_dir, CKPT_NAME)

    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    first_epoch = load_checkpoint(ckpt_path, model, optimizer)
    ddp_model = DistributedDataParallel(model)

    dataset = make_dataset()
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)

    epoch = first_epoch
    while epoch < EPOCHS:
        sampler.set_epoch(epoch)
        for x, y in loader:
            pred = ddp_model(x)
            loss = nn.functional.mse_loss(pred, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        epoch += 1
        save_checkpoint(ckpt_path, model, optimizer, next_epoch=epoch)  # epoch now = the next one to run

    if rank == 0:
        torch.save(model.state_dict(), args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
