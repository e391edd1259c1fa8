import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def make_dataset() -> TensorDataset:
    # The same 64 samples on every rank; the sampler decides which rank trains on which.
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
    return TensorDataset(x, y)


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend, rank=rank, world_size=world_size)  # MASTER_ADDR/PORT from the env
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")

    torch.manual_seed(0)
    model = nn.Linear(4, 1).to(device)  # mistake: no DDP, so each rank trains its own copy

    data = make_dataset()
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=8, sampler=sampler)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    for epoch in range(20):
        sampler.set_epoch(epoch)  # a new shuffle every epoch, the same on every rank
        for xb, yb in loader:
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(xb.to(device)), yb.to(device))
            loss.backward()  # DDP all-reduces (averages) the gradients here
            opt.step()

    state = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    dist.destroy_process_group()
    return state
