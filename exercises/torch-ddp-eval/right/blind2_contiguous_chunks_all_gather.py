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
    x_all, y_all = make_val_data()
    mine = torch.tensor_split(torch.arange(len(x_all)), world_size)[rank]  # contiguous: 0..50 and 51..100
    correct = total = 0
    with torch.no_grad():
        for start in range(0, len(mine), BATCH):
            idx = mine[start : start + BATCH]
            correct += int((model(x_all[idx]).argmax(dim=1) == y_all[idx]).sum())
            total += len(idx)
    local = torch.tensor([correct, total])
    parts = [torch.zeros_like(local) for _ in range(world_size)]
    dist.all_gather(parts, local)
    summed = torch.stack(parts).sum(dim=0)
    largest_shard = torch.tensor(total)
    dist.all_reduce(largest_shard, op=dist.ReduceOp.MAX)  # logging only; every rank calls it
    if rank == 0:
        print(f"largest shard {int(largest_shard)} samples; per-rank counts {[p.tolist() for p in parts]}")
    correct, total = int(summed[0]), int(summed[1])
    dist.destroy_process_group()
    return {"correct": torch.tensor(correct), "total": torch.tensor(total), "accuracy": torch.tensor(correct / total)}
