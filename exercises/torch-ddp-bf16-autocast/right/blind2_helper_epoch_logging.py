import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

N_SAMPLES, FEATURES, CLASSES, BATCH, EPOCHS, LR = 512, 16, 4, 32, 3, 0.01


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    """The 512 samples: four Gaussian clusters in 16 dimensions, from seed 7. Do not change."""
    g = torch.Generator().manual_seed(7)
    centers = torch.randn(CLASSES, FEATURES, generator=g) * 1.2
    y = torch.randint(0, CLASSES, (N_SAMPLES,), generator=g)
    return centers[y] + torch.randn(N_SAMPLES, FEATURES, generator=g), y


def build_model() -> nn.Module:
    """The model, from seed 0. Do not change."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))


def loader(rank: int, world_size: int) -> DataLoader:
    """This rank's batches of BATCH samples, in order (256 samples, 8 batches per epoch). Do not change."""
    dataset = TensorDataset(*make_data())
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    return DataLoader(dataset, batch_size=BATCH, sampler=sampler)


def mixed_precision_step(model, optimizer, x, y):
    """One step: float32 master weights, bfloat16 matmuls, float32 loss."""
    optimizer.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(x)
        loss = F.cross_entropy(logits, y)
    assert loss.dtype == torch.float32, loss.dtype
    loss.backward()
    optimizer.step()
    return loss.detach()


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    dist.init_process_group("gloo")
    model = DistributedDataParallel(build_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for epoch in range(EPOCHS):
        total, batches = torch.zeros(()), 0
        for x, y in loader(rank, world_size):
            total += mixed_precision_step(model, optimizer, x, y)
            batches += 1
        stats = torch.stack([total, torch.tensor(float(batches))])
        dist.all_reduce(stats, op=dist.ReduceOp.SUM)  # every rank, once per epoch; a copy, not the gradients
        if rank == 0:
            print(f"epoch {epoch}: mean loss over ranks {(stats[0] / stats[1]).item():.4f}")
    dist.destroy_process_group()
    return model.module.state_dict()
