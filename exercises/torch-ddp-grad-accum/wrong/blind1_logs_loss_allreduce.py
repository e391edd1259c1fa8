import contextlib

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

N_SAMPLES, MICRO, ACCUM, EPOCHS, LR = 88, {{ params.micro }}, {{ params.accum }}, 2, 0.1


def make_dataset() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(N_SAMPLES, 4, generator=g)
    w = torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    return x, torch.sin(x @ w) + 0.1 * torch.randn(N_SAMPLES, 1, generator=g)


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def micro_batches(rank: int, world_size: int) -> DataLoader:
    sampler = DistributedSampler(TensorDataset(*make_dataset()), world_size, rank, shuffle=False)
    return DataLoader(TensorDataset(*make_dataset()), batch_size=MICRO, sampler=sampler)


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    dist.init_process_group("gloo")
    model = DistributedDataParallel(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loader = micro_batches(rank, world_size)
    n = len(loader)
    for _ in range(EPOCHS):
        optimizer.zero_grad()
        for i, (x, y) in enumerate(loader):
            window_start = i - i % ACCUM
            window = min(ACCUM, n - window_start)  # the last window of an epoch may be shorter
            last_of_window = i == window_start + window - 1
            # Only the window's last backward all-reduces; the others add to .grad locally.
            sync = contextlib.nullcontext() if last_of_window else model.no_sync()
            with sync:
                loss = nn.functional.mse_loss(model(x), y) / window
                loss.backward()
            if last_of_window:
                optimizer.step()
                optimizer.zero_grad()
                # MISTAKE: an all_reduce of its own after every step, to log the loss averaged over the ranks: one
                # more collective per step than the target (DDP's gradient all-reduce and this one).
                logged = loss.detach() * window
                dist.all_reduce(logged, op=dist.ReduceOp.SUM)
                if rank == 0:
                    print(f"step loss (last micro-batch, mean over ranks): {logged.item() / world_size:.4f}")
    dist.destroy_process_group()
    return model.module.state_dict()
