import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

FEATURES, CLASSES = 16, 4
BATCH = 32  # samples per step on one device: each GPU keeps this batch
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
    """Accuracy over every rank's validation shard: the counts are summed across ranks, then divided."""
    model.eval()
    counts = torch.zeros(2, dtype=torch.float64)  # [correct, seen] on this rank
    with torch.no_grad():
        for xb, yb in loader:
            counts[0] += (model(xb).argmax(dim=1) == yb).sum()
            counts[1] += len(yb)
    dist.all_reduce(counts, op=dist.ReduceOp.SUM)
    return (counts[0] / counts[1]).float()


def train(rank: int, world_size: int, checkpoint_path: str) -> dict[str, torch.Tensor]:
    dist.init_process_group("gloo", rank=rank, world_size=world_size)  # MASTER_ADDR/PORT from the environment

    torch.manual_seed(0)
    model = DDP(build_model())  # broadcasts rank 0's initial weights to every rank
    train_set, val_set = make_data()
    train_sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    # mistake: the global batch given to every rank, so a step takes 128 samples
    train_loader = DataLoader(train_set, batch_size=BATCH * world_size, sampler=train_sampler)
    val_sampler = DistributedSampler(val_set, num_replicas=world_size, rank=rank, shuffle=False)
    val_loader = DataLoader(val_set, batch_size=128, sampler=val_sampler)

    # Linear scaling rule: each step now averages BATCH * world_size samples.
    opt = torch.optim.SGD(model.parameters(), lr=LR * BATCH * world_size / BATCH)

    for epoch in range(EPOCHS):
        model.train()
        train_sampler.set_epoch(epoch)  # a new shuffle and split every epoch, the same on every rank
        for xb, yb in train_loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()  # DDP averages the gradients here
            opt.step()

    accuracy = evaluate(model, val_loader)
    if rank == 0:
        torch.save(model.module.state_dict(), checkpoint_path)  # the plain model's keys, no "module."
    dist.barrier()  # nobody returns before the checkpoint is on disk
    dist.destroy_process_group()
    return {"val_accuracy": accuracy}
