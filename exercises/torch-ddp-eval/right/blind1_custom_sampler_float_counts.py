import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Sampler, TensorDataset

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


class StridedEvalSampler(Sampler[int]):
    """Like DistributedSampler(shuffle=False) but without padding: every index exactly once over all ranks."""

    def __init__(self, n: int, rank: int, world_size: int) -> None:
        self.indices = range(rank, n, world_size)

    def __iter__(self):
        return iter(self.indices)

    def __len__(self) -> int:
        return len(self.indices)


def evaluate(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Evaluate build_model() on this rank's share of the validation set; return the exact metrics of the whole set.

    Every rank returns {"correct": ..., "total": ..., "accuracy": ...} over all N_VAL samples, each counted once:
    the same numbers on every rank, as one process evaluating the whole set would get.
    """
    dist.init_process_group("gloo")
    try:
        model = build_model().eval()
        dataset = TensorDataset(*make_val_data())
        loader = DataLoader(dataset, batch_size=BATCH, sampler=StridedEvalSampler(len(dataset), rank, world_size))
        stats = torch.zeros(2, dtype=torch.float64)  # [correct, total]
        with torch.inference_mode():
            for x, y in loader:
                stats[0] += (model(x).argmax(dim=1) == y).sum()
                stats[1] += y.numel()
        local_n = int(stats[1])
        dist.all_reduce(stats)  # default op is SUM
        # logging only: the largest shard, to check nobody ran more than its share
        biggest = torch.tensor([local_n])
        dist.all_reduce(biggest, op=dist.ReduceOp.MAX)
        print(f"rank {rank}: local {local_n} samples, largest shard {int(biggest)}, global {int(stats[1])}")
        correct, total = stats[0], stats[1]
        accuracy = correct / total
    finally:
        dist.destroy_process_group()
    return {"correct": correct.long(), "total": total.long(), "accuracy": accuracy}
