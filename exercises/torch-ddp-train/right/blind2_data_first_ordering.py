import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    # data pipeline first: with explicit num_replicas/rank the sampler needs no process group yet
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)

    on_gpu = torch.cuda.is_available()
    dist.init_process_group("nccl" if on_gpu else "gloo")
    device = torch.device("cuda", rank) if on_gpu else torch.device("cpu")

    torch.manual_seed(rank)
    base = nn.Linear(4, 1).to(device)
    model = DistributedDataParallel(base, device_ids=[rank]) if on_gpu else DistributedDataParallel(base)

    mse = nn.MSELoss()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)

    steps_done = 0
    for epoch in range(20):
        sampler.set_epoch(epoch)
        batches = [(xb.to(device), yb.to(device)) for xb, yb in loader]
        for xb, yb in batches:
            sgd.zero_grad()
            out = model(xb)
            err = mse(yb, out)
            err.backward()
            sgd.step()
            steps_done += 1

    print(f"rank {rank}: {steps_done} steps, final batch loss {err.item():.2e}")
    weights = {"weight": base.weight.detach().cpu().clone(), "bias": base.bias.detach().cpu().clone()}
    dist.destroy_process_group()
    return weights
