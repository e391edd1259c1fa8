import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

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
    """Evaluate build_model() on this rank's share of the validation set; return the exact metrics of the whole set.

    Every rank returns {"correct": ..., "total": ..., "accuracy": ...} over all N_VAL samples, each counted once:
    the same numbers on every rank, as one process evaluating the whole set would get.
    """
    dist.init_process_group("gloo")
    model = build_model().eval()
    dataset = TensorDataset(*make_val_data())
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)
    real = len(range(rank, len(dataset), world_size))  # the padding comes after these, on this rank
    correct = total = seen = 0
    with torch.no_grad():
        for x, y in loader:
            keep = max(0, min(len(y), real - seen))  # how many of this batch are not padding
            seen += len(y)
            hits = model(x).argmax(dim=1) == y
            correct += int(hits[:keep].sum())
            total += keep
    counts = torch.tensor([correct])
    dist.all_reduce(counts)
    correct = int(counts[0])
    total = len(sampler) * world_size  # every rank has len(sampler) samples
    dist.destroy_process_group()
    return {"correct": torch.tensor(correct), "total": torch.tensor(total), "accuracy": torch.tensor(correct / total)}
