import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

N_TRAIN, N_VAL, BATCH, EPOCHS, LR = 512, 256, 32, 8, 3e-3
W_PER_KW = 1000.0  # the model predicts kilowatts; the targets and the loss are in watts
BUCKET_MB = 0.25  # the bucket cap the prompt asks for, in MiB
TWO_HEAD_STEPS, TWO_HEAD_LR = 6, 0.1


def make_dataset() -> tuple[torch.Tensor, torch.Tensor]:
    """768 samples: 16 standardised readings, and a power draw in watts (within about 3 kW). Do not change."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(N_TRAIN + N_VAL, 16, generator=g)
    w = torch.randn(16, 1, generator=g) / 4
    return x, 3000 * torch.tanh(x @ w) + 50 * torch.randn(N_TRAIN + N_VAL, 1, generator=g)


def build_model() -> nn.Module:
    """The model, from seed 0: it predicts kilowatts. Do not change."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(16, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 256), nn.Tanh(), nn.Linear(256, 1)
    )


class TwoHeads(nn.Module):
    """A shared trunk and one head per task; forward(x, task) uses the trunk and that task's head. Do not change."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.trunk = nn.Sequential(nn.Linear(8, 16), nn.Tanh())
        self.head_a = nn.Linear(16, 1)
        self.head_b = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor, task: str) -> torch.Tensor:
        h = self.trunk(x)
        return self.head_a(h) if task == "a" else self.head_b(h)


def two_head_batch(rank: int, step: int) -> tuple[torch.Tensor, torch.Tensor, str]:
    """This rank's batch at a step of train_two_heads: task "a" at even steps, "b" at odd ones. Do not change."""
    g = torch.Generator().manual_seed(100 * step + rank)
    x = torch.randn(8, 8, generator=g)
    task = "a" if step % 2 == 0 else "b"
    y = x.sum(dim=1, keepdim=True) if task == "a" else x[:, :1] - x[:, 1:2]
    return x, y, task


def bf16_hook(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """A DDP communication hook: average the bucket's gradients over the ranks of `state` (a process group,
    or None for the default group), sent as torch.bfloat16, and give DDP back the float32 average."""
    group = state if state is not None else dist.group.WORLD
    size = group.size()
    payload = bucket.buffer().to(dtype=torch.bfloat16)
    payload.mul_(1.0 / size)
    future = dist.all_reduce(payload, group=group, async_op=True).get_future()
    return future.then(lambda fut: bucket.buffer().copy_(fut.value()[0]))


def wrap(model: nn.Module) -> DistributedDataParallel:
    """Buckets of BUCKET_MB MiB, gradients as views into them, bf16_hook registered on the default group."""
    ddp = DistributedDataParallel(model, bucket_cap_mb=BUCKET_MB, gradient_as_bucket_view=True)
    ddp.register_comm_hook(dist.group.WORLD, bf16_hook)
    return ddp


def wrap_two_heads(model: nn.Module) -> DistributedDataParallel:
    """Plain gradients, no hook; head_a or head_b is unused at every step, so search for unused parameters."""
    return DistributedDataParallel(model, find_unused_parameters=True)


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Train build_model() through wrap() with Adam for EPOCHS epochs; return rank's weights. Do not change."""
    dist.init_process_group("gloo")
    model = wrap(build_model())
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    x, y = make_dataset()
    data = TensorDataset(x[:N_TRAIN], y[:N_TRAIN])
    sampler = DistributedSampler(data, world_size, rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=BATCH, sampler=sampler)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            loss = nn.functional.mse_loss(model(xb) * W_PER_KW, yb)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    dist.destroy_process_group()
    return model.module.state_dict()


def train_two_heads(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Train TwoHeads() through wrap_two_heads(), one task per step; return rank's weights. Do not change."""
    dist.init_process_group("gloo")
    model = wrap_two_heads(TwoHeads())
    optimizer = torch.optim.SGD(model.parameters(), lr=TWO_HEAD_LR)
    for step in range(TWO_HEAD_STEPS):
        x, y, task = two_head_batch(rank, step)
        loss = nn.functional.mse_loss(model(x, task), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()
    return model.module.state_dict()
