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
    """Backpropagate the plain mean losses, then divide the synced gradients by the window length before stepping."""
    dist.init_process_group("gloo")
    model = DistributedDataParallel(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loader = micro_batches(rank, world_size)
    for _ in range(EPOCHS):
        it = iter(enumerate(loader))
        count = 0
        for i, (x, y) in it:
            count += 1
            last = count == ACCUM or i == len(loader) - 1
            with contextlib.ExitStack() as stack:
                if not last:
                    stack.enter_context(model.no_sync())
                nn.functional.mse_loss(model(x), y).backward()
            if last:
                with torch.no_grad():
                    for p in model.parameters():
                        p.grad /= count  # scaling is linear, so after the all-reduce is as good as before
                optimizer.step()
                optimizer.zero_grad()
                count = 0
    dist.destroy_process_group()
    return model.module.state_dict()
