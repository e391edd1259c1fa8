"""A working single-device training script. Convert it to DistributedDataParallel: write train() at the bottom.

make_data, build_model and the settings are the script's; keep them as they are (the grader builds the same data
and model to check yours). train_single_device is the original loop, for reference: it is not graded.
"""

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

FEATURES, CLASSES = 16, 4
BATCH = 32  # samples per step on one device
LR = 0.005  # tuned for BATCH samples per step
EPOCHS = 6


def make_data() -> tuple[TensorDataset, TensorDataset]:
    """1024 training and 1024 validation samples from 4 overlapping Gaussian clusters: the same on every call."""
    g = torch.Generator().manual_seed(2024)
    centers = torch.randn(CLASSES, FEATURES, generator=g)
    y = torch.randint(0, CLASSES, (2048,), generator=g)
    x = centers[y] + torch.randn(2048, FEATURES, generator=g)
    return TensorDataset(x[:1024], y[:1024]), TensorDataset(x[1024:], y[1024:])


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))


def evaluate(model: nn.Module, loader: DataLoader) -> torch.Tensor:
    """Fraction of the loader's samples that the model classifies correctly."""
    model.eval()
    correct = seen = 0
    with torch.no_grad():
        for xb, yb in loader:
            correct += int((model(xb).argmax(dim=1) == yb).sum())
            seen += len(yb)
    return torch.tensor(correct / seen)


def train_single_device(checkpoint_path: str) -> dict[str, torch.Tensor]:
    """The original script: one device, one process. Reaches about 92% validation accuracy in 6 epochs."""
    torch.manual_seed(0)
    model = build_model()
    train_set, val_set = make_data()
    train_loader = DataLoader(train_set, batch_size=BATCH, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=128)
    opt = torch.optim.SGD(model.parameters(), lr=LR)

    for epoch in range(EPOCHS):
        model.train()
        for xb, yb in train_loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()

    accuracy = evaluate(model, val_loader)
    torch.save(model.state_dict(), checkpoint_path)
    return {"val_accuracy": accuracy}


def train(rank: int, world_size: int, checkpoint_path: str) -> dict[str, torch.Tensor]:
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    net = build_model()
    model = DistributedDataParallel(net)
    train_set, val_set = make_data()
    sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    train_loader = DataLoader(train_set, batch_size=BATCH, sampler=sampler, shuffle=False)
    val_loader = DataLoader(
        val_set, batch_size=128, sampler=DistributedSampler(val_set, num_replicas=world_size, rank=rank, shuffle=False)
    )
    opt = torch.optim.SGD(model.parameters(), lr=LR * world_size)

    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        model.train()
        running = torch.zeros(2)
        for xb, yb in train_loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            opt.step()
            running += torch.tensor([loss.item() * len(yb), len(yb)])
        dist.all_reduce(running)  # every rank, once per epoch, for logging only
        if rank == 0:
            print(f"epoch {epoch}: train loss {running[0] / running[1]:.4f}")

    model.eval()
    local = torch.zeros(2, dtype=torch.int64)
    with torch.no_grad():
        for xb, yb in val_loader:
            local[0] += (model(xb).argmax(dim=1) == yb).sum()
            local[1] += len(yb)
    gathered = [torch.zeros(2, dtype=torch.int64) for _ in range(world_size)]
    dist.all_gather(gathered, local)
    totals = torch.stack(gathered).sum(dim=0)
    accuracy = torch.tensor(totals[0].item() / totals[1].item())

    if rank == 0:
        torch.save(net.state_dict(), checkpoint_path)  # net is model.module
    dist.barrier()
    dist.destroy_process_group()
    return {"val_accuracy": accuracy}
