import torch
import torch.distributed as dist
from torch import nn
from torch.nn.utils import parameters_to_vector


def average_gradients(model: nn.Module, world_size: int) -> None:
    """One all_reduce for all gradients: flatten them into one buffer, average, copy back (like DDP's buckets)."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not grads:
        return
    flat = parameters_to_vector(grads)
    dist.all_reduce(flat)  # the default op is SUM
    flat.div_(world_size)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    dist.init_process_group(backend="gloo")  # rank and world size from RANK / WORLD_SIZE
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
    per_rank = len(x) // world_size
    xs = x[rank * per_rank : (rank + 1) * per_rank]
    ys = y[rank * per_rank : (rank + 1) * per_rank]
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(xs, ys), batch_size=8, shuffle=False)
    for _ in range(10):
        for xb, yb in loader:
            model.zero_grad()
            ((model(xb) - yb) ** 2).mean().backward()
            average_gradients(model, world_size)
            opt.step()
    try:
        return {name: t.detach().clone() for name, t in model.state_dict().items()}
    finally:
        dist.destroy_process_group()
