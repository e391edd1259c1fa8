import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Subset, TensorDataset

N_VAL, FEATURES, CLASSES, BATCH = 101, 8, 3, 16


def _classifier() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.ReLU(), nn.Linear(16, CLASSES))


def build_model() -> nn.Module:
    """The trained classifier (its weights come from seed 0). Do not change."""
    return _classifier()


def make_val_data() -> tuple[torch.Tensor, torch.Tensor]:
    """The 101 validation samples and their labels. Do not change."""
    g = torch.Generator().manual_seed(22)
    x = torch.randn(N_VAL, FEATURES, generator=g)
    with torch.no_grad():
        predicted = _classifier()(x).argmax(dim=1)
    noise = torch.randint(0, CLASSES, (N_VAL,), generator=g)
    flip = torch.rand(N_VAL, generator=g) < 0.4  # 40% of the labels at random: the accuracy is neither 0 nor 1
    return x, torch.where(flip, noise, predicted)


def evaluate(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    dist.init_process_group("gloo")
    model = build_model().eval()
    dataset = TensorDataset(*make_val_data())
    # Every world_size-th sample from this rank's position: shards of 51 and 50, no padding to remove.
    shard = Subset(dataset, range(rank, len(dataset), world_size))
    correct = 0
    with torch.no_grad():
        for x, y in DataLoader(shard, batch_size=BATCH):
            correct += (model(x).argmax(dim=1) == y).sum().item()
    counts = torch.tensor([correct, len(shard)], dtype=torch.float64)
    dist.all_reduce(counts)  # SUM is the default op
    dist.destroy_process_group()
    return {"correct": counts[0], "total": counts[1], "accuracy": counts[0] / counts[1]}
