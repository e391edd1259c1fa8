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
    dataset = TensorDataset(x_all, y_all)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=7)
    sampler.set_epoch(0)
    loader = DataLoader(dataset, batch_size=BATCH, sampler=sampler)
    my_indices = torch.tensor(list(iter(sampler)), dtype=torch.int64)  # same order the loader uses
    preds = []
    with torch.no_grad():
        for x, _ in loader:
            preds.append(model(x).argmax(dim=1))
    my_preds = torch.cat(preds).to(torch.int64)
    # The padded sampler gives every rank the same length, so plain all_gather works.
    gathered_preds = [torch.empty_like(my_preds) for _ in range(world_size)]
    gathered_idx = [torch.empty_like(my_indices) for _ in range(world_size)]
    dist.all_gather(gathered_preds, my_preds)
    dist.all_gather(gathered_idx, my_indices)
    all_preds = torch.cat(gathered_preds)
    all_idx = torch.cat(gathered_idx)
    # Put each prediction back at its dataset index; a duplicate writes the same value twice.
    pred_by_index = torch.full((len(dataset),), -1, dtype=torch.int64)
    pred_by_index[all_idx] = all_preds
    assert (pred_by_index >= 0).all(), "some sample was never evaluated"
    correct = int((pred_by_index == y_all).sum())
    total = len(dataset)
    dist.destroy_process_group()
    return {
        "correct": torch.tensor(correct),
        "total": torch.tensor(total),
        "accuracy": torch.tensor(correct / total, dtype=torch.float64),
    }
