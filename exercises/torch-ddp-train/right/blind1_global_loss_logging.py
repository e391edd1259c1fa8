import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Train nn.Linear(4, 1) with DistributedDataParallel as rank `rank` of `world_size` processes.

    Initialise the default process group (gloo on CPU, nccl with CUDA; MASTER_ADDR and MASTER_PORT are set),
    seed and build the model, wrap it in DistributedDataParallel, train on the prompt's 64 samples sharded
    with a DistributedSampler, destroy the process group, and return the unwrapped model's state_dict.
    """
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    dist.init_process_group(backend)
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")

    # Seeded per rank on purpose: DDP broadcasts rank 0's parameters when it wraps the model.
    torch.manual_seed(100 + rank)
    model = nn.Linear(4, 1).to(device)
    ddp_model = DistributedDataParallel(model, device_ids=[rank] if backend == "nccl" else None)

    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1234))
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)

    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.1)
    loss_fn = nn.MSELoss(reduction="mean")

    for epoch in range(20):
        sampler.set_epoch(epoch)
        running = torch.zeros(2, device=device)  # [sum of squared errors, sample count]
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            optimizer.zero_grad()
            out = ddp_model(xb)
            loss = loss_fn(out, yb)
            loss.backward()
            optimizer.step()
            running += torch.stack([loss.detach() * len(xb), torch.tensor(float(len(xb)), device=device)])
        # logging only: every rank joins this all_reduce, so nobody waits forever
        dist.all_reduce(running, op=dist.ReduceOp.SUM)
        if rank == 0 and (epoch % 5 == 4 or epoch == 0):
            print(f"[epoch {epoch:2d}] global train mse = {(running[0] / running[1]).item():.3e}", flush=True)

    dist.destroy_process_group()
    # `model` is the very module DDP wraps (ddp_model.module is model), so its keys are plain
    return model.state_dict()
