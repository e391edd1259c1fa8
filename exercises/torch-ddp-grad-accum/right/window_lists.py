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
    """Cut each epoch's micro-batches into windows first, then accumulate window by window."""
    dist.init_process_group("gloo")
    model = DistributedDataParallel(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loader = micro_batches(rank, world_size)
    for _ in range(EPOCHS):
        batches = list(loader)
        windows = [batches[i : i + ACCUM] for i in range(0, len(batches), ACCUM)]
        for window in windows:
            *quiet, last = window
            with model.no_sync():
                for x, y in quiet:
                    (nn.functional.mse_loss(model(x), y) / len(window)).backward()
            x, y = last
            (nn.functional.mse_loss(model(x), y) / len(window)).backward()  # this backward all-reduces
            optimizer.step()
            optimizer.zero_grad()
    dist.destroy_process_group()
    return model.module.state_dict()
