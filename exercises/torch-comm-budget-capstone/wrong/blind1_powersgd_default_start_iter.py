import contextlib

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
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


ACCUM = 1  # PowerSGD sends low-rank factors: no need to accumulate


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Train build_model() with DDP and Adam (LR) for EPOCHS epochs of every micro-batch; return rank's weights.

    PowerSGD (rank-4 factors of each matrix gradient): far fewer bytes than a quarter of plain DDP's.
    """
    dist.init_process_group("gloo")
    model = DistributedDataParallel(build_model())
    state = powerSGD.PowerSGDState(process_group=None, matrix_approximation_rank=4)
    model.register_comm_hook(state, powerSGD.powerSGD_hook)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    sampler, loader = micro_batches(rank, world_size)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for i, (xb, yb) in enumerate(loader):
            sync = (i + 1) % ACCUM == 0
            with contextlib.nullcontext() if sync else model.no_sync():
                loss = nn.functional.mse_loss(model(xb) * W_PER_KW, yb) / ACCUM
                loss.backward()
            if sync:
                optimizer.step()
                optimizer.zero_grad()
    dist.destroy_process_group()
    return model.module.state_dict()
