import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

TRUE_W = torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T
EPOCHS = 20
BATCH = 8
LR = 0.1


def _setup(rank: int, world_size: int) -> torch.device:
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    assert "MASTER_ADDR" in os.environ and "MASTER_PORT" in os.environ
    dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size)
    if backend == "nccl":
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        return dev
    return torch.device("cpu")


def _make_dataset() -> TensorDataset:
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    y = x @ TRUE_W + 0.5
    return TensorDataset(x, y)


def _make_model(device: torch.device) -> tuple[nn.Module, DistributedDataParallel]:
    torch.manual_seed(7)
    net = nn.Linear(4, 1).to(device)
    if device.type == "cuda":
        ddp = DistributedDataParallel(net, device_ids=[device.index], output_device=device.index)
    else:
        ddp = DistributedDataParallel(net)
    return net, ddp


def _run_epoch(model, loader, optimizer, loss_fn, device) -> float:
    total, n = 0.0, 0
    for xb, yb in loader:
        xb = xb.to(device, non_blocking=True)
        yb = yb.to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        optimizer.step()
        total += loss.item() * xb.shape[0]
        n += xb.shape[0]
    return total / max(n, 1)


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    device = _setup(rank, world_size)
    net, model = _make_model(device)
    dataset = _make_dataset()
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loss_fn = nn.MSELoss()

    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        _run_epoch(model, loader, optimizer, loss_fn, device)

    state = {k: v.detach().cpu().clone() for k, v in net.state_dict().items()}
    dist.destroy_process_group()
    return state
