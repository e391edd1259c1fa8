import contextlib  # noqa: F401  (contextlib.nullcontext() is handy for "no context manager")

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

N_SAMPLES, MICRO, ACCUM, EPOCHS, LR = 88, {{ params.micro }}, {{ params.accum }}, 2, 0.1


def make_dataset() -> tuple[torch.Tensor, torch.Tensor]:
    """The 88 samples: x ~ N(0, 1) from seed 1234, y = sin(x @ w) plus a little noise. Do not change."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(N_SAMPLES, 4, generator=g)
    w = torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    return x, torch.sin(x @ w) + 0.1 * torch.randn(N_SAMPLES, 1, generator=g)


def build_model() -> nn.Module:
    """The model, from seed 0. Do not change."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def micro_batches(rank: int, world_size: int) -> DataLoader:
    """This rank's micro-batches of MICRO samples, in order: 44 samples, 44 / MICRO micro-batches. Do not change."""
    sampler = DistributedSampler(TensorDataset(*make_dataset()), world_size, rank, shuffle=False)
    return DataLoader(TensorDataset(*make_dataset()), batch_size=MICRO, sampler=sampler)


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Train build_model() with DDP for EPOCHS epochs, one optimizer step per window of up to ACCUM micro-batches.

    Every step must use the gradient of the mean loss over the window's samples on all ranks (the large batch's
    gradient), with one all-reduce per step: run the forward AND the backward of every micro-batch of a window but
    its last inside model.no_sync() (DDP decides at forward time whether the backward all-reduces).
    ACCUM does not divide an epoch's micro-batches evenly: each epoch ends with a shorter window, which steps too.
    Return the unwrapped model's state_dict.
    """
    dist.init_process_group("gloo")
    model = DistributedDataParallel(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loader = micro_batches(rank, world_size)
    n_micro = len(loader)  # micro-batches per epoch
    for _ in range(EPOCHS):
        for i, (x, y) in enumerate(loader):
            start = (i // ACCUM) * ACCUM  # first micro-batch of this window
            size = min(ACCUM, n_micro - start)  # micro-batches in this window (the last one is shorter)
            last = i == start + size - 1
            with (contextlib.nullcontext() if last else model.no_sync()):
                # mean over the large batch: every rank contributes `size` micro-batches
                loss = nn.functional.mse_loss(model(x), y) / (size * world_size)
                loss.backward()
            if last:
                optimizer.step()
                optimizer.zero_grad()
    dist.destroy_process_group()
    return model.module.state_dict()
