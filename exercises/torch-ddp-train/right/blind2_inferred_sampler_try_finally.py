import copy
from collections import OrderedDict

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def _strip_module(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = OrderedDict()
    for key, value in state.items():
        out[key[len("module.") :] if key.startswith("module.") else key] = value
    return out


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    try:
        assert dist.get_rank() == rank and dist.get_world_size() == world_size
        device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")

        torch.manual_seed(2024)
        ddp = DistributedDataParallel(
            nn.Linear(4, 1).to(device),
            device_ids=None if device.type == "cpu" else [rank],
        )

        x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
        y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
        dataset = TensorDataset(x, y)

        # num_replicas and rank are read from the (already initialised) default group
        sampler = DistributedSampler(dataset)
        assert sampler.num_replicas == world_size and sampler.rank == rank
        loader = DataLoader(dataset, sampler=sampler, batch_size=8)

        criterion = nn.MSELoss(reduction="mean")
        optim = torch.optim.SGD(params=ddp.parameters(), lr=0.1)

        for epoch in range(20):
            sampler.set_epoch(epoch)
            for xb, yb in loader:
                optim.zero_grad()
                criterion(ddp(xb.to(device)), yb.to(device)).backward()
                optim.step()

        state = _strip_module(copy.deepcopy(ddp.state_dict()))
        return {k: v.cpu() for k, v in state.items()}
    finally:
        dist.destroy_process_group()
