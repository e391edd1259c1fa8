import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
from torch.nn.parallel import DistributedDataParallel as DDP
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


def train(rank: int, world_size: int, checkpoint_path: str) -> dict[str, torch.Tensor]:
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DDP(build_model())
    train_set, val_set = make_data()
    sampler = DistributedSampler(train_set, seed=7)  # rank and world size from the default group
    loader = DataLoader(train_set, batch_size=BATCH, sampler=sampler)
    global_batch = BATCH * world_size
    opt = torch.optim.SGD(model.parameters(), lr=LR * global_batch / BATCH)

    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        model.train()
        for xb, yb in loader:
            loss = nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    # Equal shards (1024 / 2 samples each, no padding), so the mean of the ranks' accuracies is the global one.
    val_x, val_y = val_set.tensors
    mine = list(DistributedSampler(val_set, shuffle=False))
    model.eval()
    with torch.no_grad():
        accuracy = (model(val_x[mine]).argmax(dim=1) == val_y[mine]).float().mean()
    dist.all_reduce(accuracy, op=dist.ReduceOp.AVG)

    if rank == 0:
        state = model.state_dict()  # keys "module.0.weight", ...
        consume_prefix_in_state_dict_if_present(state, "module.")  # strips the prefix in place
        torch.save(state, checkpoint_path)
    dist.destroy_process_group()
    return {"val_accuracy": accuracy}
