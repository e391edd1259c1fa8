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

CKPT_NAME = "train_state.pt"


def load_state(path: str, model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """Restore model and optimizer from path if it exists; return the first epoch still to train."""
    if not os.path.exists(path):
        return 0
    state = torch.load(path, map_location=torch.device("cpu"), weights_only=True)
    model.load_state_dict(state["model_state"])
    optimizer.load_state_dict(state["optimizer_state"])
    return int(state["completed_epoch"]) + 1


def save_state(path: str, model: nn.Module, optimizer: torch.optim.Optimizer, epoch: int) -> None:
    """Atomically write the training state (call on rank 0 only)."""
    tmp = f"{path}.tmp-{os.getpid()}"
    torch.save(
        {"model_state": model.state_dict(), "optimizer_state": optimizer.state_dict(), "completed_epoch": epoch},
        tmp,
    )
    os.replace(tmp, path)


def main() -> None:
    """Train nn.Linear(4, 1) with DDP on the ranks torchrun started; survive a restart by resuming a checkpoint.

    Run as: torchrun --standalone --nproc-per-node 2 --max-restarts 1 submission.py --ckpt-dir DIR --out FILE
    """
    parser = argparse.ArgumentParser()
    parser.add_argument("--ckpt-dir", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    dist.init_process_group(backend="gloo", init_method="env://")
    rank: int = dist.get_rank()
    world: int = dist.get_world_size()
    restart: int = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))

    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    ddp_model = DistributedDataParallel(model)

    # Every rank reads the same file and loads it into the wrapped module (identical on all ranks).
    ckpt_path = os.path.join(args.ckpt_dir, CKPT_NAME)
    start_epoch = load_state(ckpt_path, ddp_model.module, optimizer)

    # Defensive check: all ranks must agree on where to resume.
    agree = torch.tensor([start_epoch, -start_epoch], dtype=torch.int64)
    dist.all_reduce(agree, op=dist.ReduceOp.MAX)
    if agree[0].item() != start_epoch or -agree[1].item() != start_epoch:
        raise RuntimeError(f"rank {rank}: ranks disagree on the resume epoch")
    if rank == 0:
        print(f"[restart {restart}] world={world} starting at epoch {start_epoch}", flush=True)

    dataset = make_dataset()
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)

    for epoch in range(start_epoch, EPOCHS):
        sampler.set_epoch(epoch)
        loss_sum = torch.zeros(1)
        for x, y in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(ddp_model(x), y)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()

        # Logging only: average loss over all ranks.
        dist.all_reduce(loss_sum, op=dist.ReduceOp.SUM)
        if rank == 0:
            print(f"epoch {epoch}: mean loss {loss_sum.item() / (world * len(loader)):.5f}", flush=True)
            save_state(ckpt_path, ddp_model.module, optimizer, epoch)
        dist.barrier()

    if rank == 0:
        torch.save(ddp_model.module.state_dict(), args.out)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
