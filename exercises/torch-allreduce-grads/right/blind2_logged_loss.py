import torch
import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module, world_size: int) -> None:
    """Average every parameter's .grad across all ranks, in place."""
    assert dist.is_initialized(), "the default process group must be initialised"
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.grad is None:
                continue
            dist.all_reduce(p.grad, op=dist.ReduceOp.SUM)
            p.grad.div_(world_size)


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
    xs, ys = x.chunk(world_size)[rank], y.chunk(world_size)[rank]

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    n_steps = xs.shape[0] // 8
    for epoch in range(10):
        epoch_loss = torch.zeros(1)
        for step in range(n_steps):
            xb, yb = xs[step * 8 : (step + 1) * 8], ys[step * 8 : (step + 1) * 8]
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(xb), yb)
            loss.backward()
            average_gradients(model, world_size)
            optimizer.step()
            epoch_loss += loss.detach()
        # every rank joins this all-reduce; only rank 0 prints the mean over ranks and steps
        dist.all_reduce(epoch_loss, op=dist.ReduceOp.SUM)
        if rank == 0:
            print(f"epoch {epoch}: mean loss {epoch_loss.item() / (world_size * n_steps):.5f}")

    dist.destroy_process_group()
    return model.state_dict()
