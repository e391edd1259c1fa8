import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, TensorDataset


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Train nn.Linear(4, 1) with DistributedDataParallel as rank `rank` of `world_size` processes.

    Initialise the default process group (gloo on CPU, nccl with CUDA; MASTER_ADDR and MASTER_PORT are set),
    seed and build the model, wrap it in DistributedDataParallel, train on the prompt's 64 samples sharded
    with a DistributedSampler, destroy the process group, and return the unwrapped model's state_dict.
    """
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", init_method="env://")
    on_gpu = dist.get_backend() == "nccl"
    dev = f"cuda:{rank}" if on_gpu else "cpu"

    torch.manual_seed(1)
    ddp = DistributedDataParallel(nn.Linear(4, 1, device=dev), device_ids=[rank] if on_gpu else None)

    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(64, 4, generator=gen)
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
    dataset = TensorDataset(x, y)

    shard = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    batches = BatchSampler(shard, batch_size=8, drop_last=False)
    loader = DataLoader(dataset, batch_sampler=batches)

    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.0)
    mse = nn.MSELoss()
    for epoch in range(20):
        shard.set_epoch(epoch)
        for xb, yb in loader:
            xb = xb.to(dev, non_blocking=True)
            yb = yb.to(dev, non_blocking=True)
            loss = mse(ddp(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if rank == 0:
            print(f"rank0 epoch {epoch} last-batch loss {loss.item():.4g}")

    inner: nn.Module = ddp.module
    weights = inner.state_dict()
    dist.destroy_process_group()
    return weights
