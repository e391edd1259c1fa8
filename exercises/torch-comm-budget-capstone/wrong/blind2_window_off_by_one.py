import contextlib  # noqa: F401  (contextlib.nullcontext() is handy for "no context manager")

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

N_TRAIN, N_VAL, MICRO, EPOCHS, LR = 512, 256, 16, 8, 3e-3
W_PER_KW = 1000.0  # the model predicts kilowatts; the targets and the loss are in watts
BUDGET = 2_179_088  # bytes a rank may hand to collectives per epoch


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


def micro_batches(rank: int, world_size: int) -> tuple[DistributedSampler, DataLoader]:
    """This rank's sampler and its loader of MICRO samples per micro-batch (16 per epoch). Do not change."""
    x, y = make_dataset()
    data = TensorDataset(x[:N_TRAIN], y[:N_TRAIN])
    sampler = DistributedSampler(data, world_size, rank, shuffle=True, seed=0)
    return sampler, DataLoader(data, batch_size=MICRO, sampler=sampler)


ACCUM = 2  # micro-batches per optimizer step: 8 synced backwards per epoch instead of 16


def bf16_hook(state, bucket):
    """All-reduce the bucket as bfloat16 (2 bytes per gradient) and hand DDP back the average in float32."""
    group = state if state is not None else dist.group.WORLD
    world = dist.get_world_size(group)
    compressed = bucket.buffer().to(torch.bfloat16).div_(world)
    fut = dist.all_reduce(compressed, group=group, async_op=True).get_future()

    def decompress(fut):
        out = bucket.buffer()
        out.copy_(fut.value()[0])
        return out

    return fut.then(decompress)


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """DDP + Adam, bfloat16-compressed all-reduces, and accumulation over ACCUM micro-batches per step."""
    dist.init_process_group("gloo")
    model = DistributedDataParallel(build_model())
    model.register_comm_hook(None, bf16_hook)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    sampler, loader = micro_batches(rank, world_size)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for i, (xb, yb) in enumerate(loader):
            last_in_window = i % ACCUM == 0
            ctx = contextlib.nullcontext() if last_in_window else model.no_sync()
            with ctx:
                loss = nn.functional.mse_loss(model(xb) * W_PER_KW, yb) / ACCUM
                loss.backward()
            if last_in_window:
                optimizer.step()
                optimizer.zero_grad()
    dist.destroy_process_group()
    return model.module.state_dict()
