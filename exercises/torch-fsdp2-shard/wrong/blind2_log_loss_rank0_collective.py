import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

N_TRAIN, N_VAL, BATCH, EPOCHS, LR = 512, 256, 32, 6, 3e-3


def make_dataset() -> tuple[torch.Tensor, torch.Tensor]:
    """768 samples: 32 features and one of 4 classes, from a fixed random teacher. Do not change."""
    g = torch.Generator().manual_seed(11)
    x = torch.randn(N_TRAIN + N_VAL, 32, generator=g)
    teacher = torch.randn(32, 4, generator=g)
    return x, (x @ teacher).argmax(dim=1)


def build_model() -> nn.Module:
    """The model, from seed 0: four Linear layers. Do not change."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 4)
    )


def shard(model: nn.Module) -> nn.Module:
    """Shard model over the ranks with FSDP2: every Linear layer its own group, then the root; return model."""
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer)
    fully_shard(model)
    return model


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Return the whole unsharded state dict as plain CPU tensors on rank 0 and {} on every other rank.

    Every rank must call it: gathering the shards is a collective.
    """
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)
    return state if dist.get_rank() == 0 else {}


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Train the sharded build_model() with AdamW for EPOCHS epochs; return full_state_dict(model)."""
    dist.init_process_group("gloo")
    model: nn.Module = shard(build_model())
    optimizer: torch.optim.Optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    x, y = make_dataset()
    data = TensorDataset(x[:N_TRAIN], y[:N_TRAIN])
    sampler = DistributedSampler(data, world_size, rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = nn.functional.cross_entropy(model(xb), yb)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        if rank == 0:  # only rank 0 prints, so only rank 0 needs the averaged loss
            avg = loss.detach().clone()
            dist.all_reduce(avg, op=dist.ReduceOp.SUM)
            print(f"epoch {epoch}: loss {avg.item() / world_size:.4f}")
    state = full_state_dict(model)  # on every rank
    dist.destroy_process_group()
    return state
