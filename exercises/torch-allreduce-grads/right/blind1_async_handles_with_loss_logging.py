import torch
import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module, world_size: int) -> None:
    """Average every parameter's .grad across all ranks, in place, as DistributedDataParallel does.

    Call it after loss.backward() and before optimizer.step(). The default process group is already
    initialised. Parameters whose .grad is None are skipped. Returns None.
    """
    assert dist.is_initialized(), "call init_process_group first"
    pending: list[tuple] = []
    for p in model.parameters():
        if p.grad is None:
            continue
        work = dist.all_reduce(p.grad, op=dist.ReduceOp.SUM, async_op=True)
        pending.append((work, p.grad))
    # wait for every reduction before touching the result
    for work, grad in pending:
        work.wait()
        grad.div_(world_size)


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Train the prompt's model as rank `rank` of `world_size` processes, without DistributedDataParallel.

    Initialise a gloo process group, seed with torch.manual_seed(0) and build
    nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)); train 10 epochs on this rank's block of the
    prompt's 64 samples (x.chunk(world_size)[rank]), batches of 8 in order, MSE loss, SGD lr=0.1, calling
    average_gradients between backward and step; destroy the process group and return model.state_dict().
    """
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    assert dist.get_world_size() == world_size

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
    xs, ys = x.chunk(world_size)[rank], y.chunk(world_size)[rank]

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(10):
        epoch_loss = torch.zeros(1)
        for start in range(0, xs.size(0), 8):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(xs[start : start + 8]), ys[start : start + 8])
            loss.backward()
            average_gradients(model, world_size)
            optimizer.step()
            epoch_loss += loss.detach()
        # logging only: global mean loss of the epoch (every rank takes part in the collective)
        dist.all_reduce(epoch_loss, op=dist.ReduceOp.SUM)
        if rank == 0:
            print(f"epoch {epoch}: mean loss {epoch_loss.item() / (world_size * (xs.size(0) // 8)):.4f}")

    dist.destroy_process_group()
    return model.state_dict()
