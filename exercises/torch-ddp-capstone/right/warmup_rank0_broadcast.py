import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

FEATURES, CLASSES = 16, 4
BATCH = 32  # samples per step on one device
LR = 0.005  # tuned for BATCH samples per step
EPOCHS = 6
WARMUP_STEPS = 4


def make_data() -> tuple[TensorDataset, TensorDataset]:
    """1024 training and 1024 validation samples from 4 overlapping Gaussian clusters: the same on every call."""
    g = torch.Generator().manual_seed(2024)
    centers = torch.randn(CLASSES, FEATURES, generator=g)
    y = torch.randint(0, CLASSES, (2048,), generator=g)
    x = centers[y] + torch.randn(2048, FEATURES, generator=g)
    return TensorDataset(x[:1024], y[:1024]), TensorDataset(x[1024:], y[1024:])


def build_model() -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))


def train(rank: int, world_size: int, checkpoint_path: str) -> dict[str, torch.Tensor]:
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DDP(build_model())
    train_set, val_set = make_data()
    sampler = DistributedSampler(train_set, num_replicas=world_size, rank=rank, shuffle=True, seed=3)
    loader = DataLoader(train_set, batch_size=BATCH, sampler=sampler, drop_last=False)
    target_lr = LR * world_size  # linear scaling rule, reached after a short linear warm-up
    opt = torch.optim.SGD(model.parameters(), lr=target_lr)
    warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / WARMUP_STEPS))

    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        model.train()
        for xb, yb in loader:
            opt.zero_grad()
            nn.functional.cross_entropy(model(xb), yb).backward()
            opt.step()
            warmup.step()

    # Rank 0 evaluates the whole validation set and sends the result to the others.
    accuracy = torch.zeros(())
    if rank == 0:
        model.module.eval()
        x, y = val_set.tensors
        with torch.no_grad():
            accuracy = (model.module(x).argmax(dim=1) == y).float().mean()
        torch.save(model.module.state_dict(), checkpoint_path)
    dist.broadcast(accuracy, src=0)
    dist.destroy_process_group()
    return {"val_accuracy": accuracy}
