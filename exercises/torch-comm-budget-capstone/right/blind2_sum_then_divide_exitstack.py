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


K = 2  # accumulation window


def make_bf16_hook(world_size):
    def bf16_sum_hook(state, bucket):
        grads = bucket.buffer()
        fut = dist.all_reduce(grads.to(torch.bfloat16), async_op=True).get_future()

        def unpack(f):
            summed = f.value()[0].to(torch.float32)
            grads.copy_(summed / world_size)
            return grads

        return fut.then(unpack)

    return bf16_sum_hook


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    dist.init_process_group("gloo")
    model = DistributedDataParallel(build_model())
    model.register_comm_hook(None, make_bf16_hook(world_size))
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    sampler, loader = micro_batches(rank, world_size)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for i, (xb, yb) in enumerate(loader):
            sync_now = i % K == K - 1
            with contextlib.ExitStack() as stack:
                if not sync_now:
                    stack.enter_context(model.no_sync())
                out = model(xb)
                loss = nn.functional.mse_loss(out * W_PER_KW, yb)
                loss.div(K).backward()
            if sync_now:
                optimizer.step()
                optimizer.zero_grad()
    dist.destroy_process_group()
    return model.module.state_dict()
