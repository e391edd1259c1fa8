import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    if torch.cuda.is_available():
        dist.init_process_group("nccl")
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
    else:
        dist.init_process_group("gloo")
        device = torch.device("cpu")
    print(f"[rank {rank}/{world_size}] backend={dist.get_backend()} device={device}", flush=True)

    torch.manual_seed(0)
    model = DistributedDataParallel(
        nn.Linear(4, 1).to(device), **({"device_ids": [device.index]} if device.type == "cuda" else {})
    )

    gen = torch.Generator()
    gen.manual_seed(1234)
    x = torch.randn(64, 4, generator=gen)
    y = x @ torch.tensor([[1.0, -2.0, 0.5, 3.0]]).T + 0.5
    dataset = TensorDataset(x, y)

    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler, shuffle=False, drop_last=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.0)

    epoch = 0
    while epoch < 20:
        sampler.set_epoch(epoch)
        it = iter(loader)
        running = torch.zeros((), device=device)
        steps = 0
        while True:
            try:
                xb, yb = next(it)
            except StopIteration:
                break
            xb, yb = xb.to(device), yb.to(device)
            out = model(xb)
            loss = ((out - yb) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss.detach()
            steps += 1
        # every rank takes part in this collective, so no one waits forever
        dist.all_reduce(running, op=dist.ReduceOp.SUM)
        if rank == 0:
            print(f"epoch {epoch:2d}  mean batch loss {running.item() / (steps * world_size):.6f}", flush=True)
        epoch += 1

    result = {}
    for name, tensor in model.module.state_dict().items():
        result[name] = tensor.detach().to("cpu").clone()
    dist.barrier()
    dist.destroy_process_group()
    print(f"[rank {rank}] returning {sorted(result)}", flush=True)
    return result
