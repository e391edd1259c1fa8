import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    cuda = torch.cuda.is_available()
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    device = torch.device(f"cuda:{rank}") if cuda else torch.device("cpu")

    # ranks seeded differently on purpose: DDP's broadcast from rank 0 makes them equal
    torch.manual_seed(100 + rank)
    linear = nn.Linear(4, 1).to(device)
    # optimizer on the inner module's parameters: DDP shares these same tensors
    opt = torch.optim.SGD(linear.parameters(), lr=0.1)
    model = DistributedDataParallel(linear, device_ids=[rank] if cuda else None)

    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
    dataset = TensorDataset(x, y)

    for _epoch in range(20):
        sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
        for xb, yb in DataLoader(dataset, batch_size=8, sampler=sampler):
            xb, yb = xb.to(device), yb.to(device)
            pred = model(xb)
            loss = F.mse_loss(pred, yb)
            opt.zero_grad()
            loss.backward()
            opt.step()

    dist.destroy_process_group()
    return model.module.state_dict()
