import contextlib

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


from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD  # noqa: E402

ACCUM = 2


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Train build_model() with DDP and Adam (LR) for EPOCHS epochs of every micro-batch; return rank's weights.

    PowerSGD (rank 8) with accumulation over ACCUM micro-batches, plus one tiny all-reduce per epoch to log the
    mean loss over the ranks (it counts against the budget too: 4 bytes).
    """
    dist.init_process_group("gloo")
    model = DistributedDataParallel(build_model(), gradient_as_bucket_view=True)
    state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank=8, start_powerSGD_iter=2)
    model.register_comm_hook(state, powerSGD.powerSGD_hook)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    sampler, loader = micro_batches(rank, world_size)
    n = len(loader)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        running = torch.zeros(1)
        for i, (xb, yb) in enumerate(loader):
            step_now = (i + 1) % ACCUM == 0 or i == n - 1
            with model.no_sync() if not step_now else contextlib.nullcontext():
                loss = nn.functional.mse_loss(model(xb) * W_PER_KW, yb)
                (loss / ACCUM).backward()
            running += loss.detach()
            if step_now:
                optimizer.step()
                optimizer.zero_grad()
        dist.all_reduce(running)
        if rank == 0:
            print(f"epoch {epoch}: mean loss {running.item() / (n * world_size):.0f} W^2")
    dist.destroy_process_group()
    return model.module.state_dict()
