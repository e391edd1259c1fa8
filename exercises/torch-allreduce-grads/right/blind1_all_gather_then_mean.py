import torch
import torch.distributed as dist
from torch import nn


def average_gradients(model: nn.Module, world_size: int) -> None:
    """Average every parameter's .grad across all ranks, in place, as DistributedDataParallel does.

    Call it after loss.backward() and before optimizer.step(). The default process group is already
    initialised. Parameters whose .grad is None are skipped. Returns None.
    """
    for param in model.parameters():
        grad = param.grad
        if grad is None:
            continue
        gathered = [torch.empty_like(grad) for _ in range(world_size)]
        dist.all_gather(gathered, grad)  # every rank receives every rank's gradient
        grad.copy_(torch.stack(gathered).mean(dim=0))


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Train the prompt's model as rank `rank` of `world_size` processes, without DistributedDataParallel.

    Initialise a gloo process group, seed with torch.manual_seed(0) and build
    nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)); train 10 epochs on this rank's block of the
    prompt's 64 samples (x.chunk(world_size)[rank]), batches of 8 in order, MSE loss, SGD lr=0.1, calling
    average_gradients between backward and step; destroy the process group and return model.state_dict().
    """
    dist.init_process_group(backend="gloo")  # rank / world size come from RANK and WORLD_SIZE
    if dist.get_rank() != rank:
        raise RuntimeError(f"RANK env var ({dist.get_rank()}) disagrees with rank argument ({rank})")

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(64, 4, generator=gen)
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
    xs, ys = x.chunk(world_size)[rank], y.chunk(world_size)[rank]

    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    step = 0
    epoch = 0
    while epoch < 10:
        i = 0
        while i < len(xs):
            optimizer.zero_grad()
            out = model(xs[i : i + 8])
            loss = nn.functional.mse_loss(out, ys[i : i + 8], reduction="mean")
            loss.backward()
            average_gradients(model, world_size)
            optimizer.step()
            step += 1
            i += 8
        epoch += 1
    assert step == 10 * (len(xs) // 8)

    dist.destroy_process_group()
    return model.state_dict()
