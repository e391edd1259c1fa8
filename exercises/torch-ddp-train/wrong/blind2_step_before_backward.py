import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")

    torch.manual_seed(0)
    model = nn.Linear(4, 1).to(device)
    ddp_model = DistributedDataParallel(model, device_ids=[rank] if backend == "nccl" else None)

    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
    dataset = TensorDataset(x, y)

    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)

    loss_fn = nn.MSELoss()
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)

    for epoch in range(20):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            optimizer.zero_grad()
            loss = loss_fn(ddp_model(xb), yb)
            optimizer.step()
            loss.backward()

    dist.destroy_process_group()
    return model.state_dict()
