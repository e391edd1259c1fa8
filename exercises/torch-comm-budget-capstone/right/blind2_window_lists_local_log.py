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


ACCUM = 2


def bf16_hook(state, bucket):
    world = dist.get_world_size()
    buf = bucket.buffer()
    low = buf.to(dtype=torch.bfloat16) / world
    return dist.all_reduce(low, async_op=True).get_future().then(lambda f: buf.copy_(f.value()[0]))


def run_window(model, optimizer, window):
    """Backward every micro-batch of the window, syncing only on the last, then one optimizer step."""
    optimizer.zero_grad()
    total = 0.0
    for j, (xb, yb) in enumerate(window):
        ctx = model.no_sync() if j < len(window) - 1 else contextlib.nullcontext()
        with ctx:
            loss = nn.functional.mse_loss(model(xb) * W_PER_KW, yb) / len(window)
            loss.backward()
        total += loss.item()
    optimizer.step()
    return total


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    dist.init_process_group("gloo")
    model = DistributedDataParallel(build_model())
    model.register_comm_hook(None, bf16_hook)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    sampler, loader = micro_batches(rank, world_size)
    n_params = sum(p.numel() for p in model.parameters())
    est = n_params * 2 * (len(loader) // ACCUM)  # local estimate only, no collective
    if rank == 0:
        print(f"estimated bytes per epoch: {est} (budget {BUDGET})")
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        window, epoch_loss = [], 0.0
        for batch in loader:
            window.append(batch)
            if len(window) == ACCUM:
                epoch_loss += run_window(model, optimizer, window)
                window = []
        if window:
            epoch_loss += run_window(model, optimizer, window)
        if rank == 0:
            print(f"epoch {epoch}: rank-0 mean window loss {epoch_loss / (len(loader) / ACCUM):.0f} W^2")
    dist.destroy_process_group()
    return model.module.state_dict()
