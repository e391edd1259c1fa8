import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    device = torch.device(f"cuda:{rank}") if torch.cuda.is_available() else torch.device("cpu")

    torch.manual_seed(42)
    net = nn.Linear(4, 1).to(device)
    model = DistributedDataParallel(net, device_ids=[rank] if device.type == "cuda" else None)

    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5

    # this rank's half
    x_local = x[rank::world_size]
    y_local = y[rank::world_size]
    dataset = TensorDataset(x_local, y_local)
    loader = DataLoader(dataset, batch_size=8, shuffle=True)

    criterion = nn.MSELoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    for _epoch in range(20):
        for xb, yb in loader:
            xb = xb.to(device)
            yb = yb.to(device)
            opt.zero_grad()
            loss = criterion(model(xb), yb)
            loss.backward()
            opt.step()

    dist.destroy_process_group()
    return net.state_dict()
