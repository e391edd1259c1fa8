import torch
import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module, world_size: int) -> None:
    """Average every parameter's .grad across all ranks, in place, as DistributedDataParallel does."""
    for p in model.parameters():
        if p.grad is not None:
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad /= world_size


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Train the prompt's model as rank `rank` of `world_size` processes, without DistributedDataParallel."""
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
    xs, ys = x.chunk(world_size)[rank], y.chunk(world_size)[rank]

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(10):
        for i in range(0, xs.shape[0], 8):
            xb, yb = xs[i : i + 8], ys[i : i + 8]
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            average_gradients(model, world_size)
            optimizer.step()
            if rank == 0 and i == 0:
                # log the loss averaged over all ranks
                loss_avg = loss.detach().clone()
                dist.all_reduce(loss_avg, op=dist.ReduceOp.SUM)
                print(f"epoch {epoch}: loss {loss_avg.item() / world_size:.4f}")

    dist.destroy_process_group()
    return model.state_dict()
