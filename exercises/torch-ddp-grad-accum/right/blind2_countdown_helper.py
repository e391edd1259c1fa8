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
    per_epoch = len(loader)
    n_windows = -(-per_epoch // ACCUM)  # ceil: 11 micro-batches -> 3 windows
    sizes = [ACCUM] * (per_epoch // ACCUM) + ([per_epoch % ACCUM] if per_epoch % ACCUM else [])
    assert len(sizes) == n_windows and sum(sizes) == per_epoch

    def forward_backward(x: torch.Tensor, y: torch.Tensor, window_size: int) -> None:
        (nn.functional.mse_loss(model(x), y) / window_size).backward()

    steps = 0
    for _ in range(EPOCHS):
        window, left = 0, sizes[0]
        for x, y in loader:
            left -= 1
            if left > 0:
                with model.no_sync():
                    forward_backward(x, y, sizes[window])
            else:  # last micro-batch of the window: this backward all-reduces the accumulated gradients
                forward_backward(x, y, sizes[window])
                optimizer.step()
                optimizer.zero_grad()
                steps += 1
                window += 1
                left = sizes[window] if window < len(sizes) else 0
    assert steps == EPOCHS * n_windows, steps
    dist.destroy_process_group()
    return model.module.state_dict()
