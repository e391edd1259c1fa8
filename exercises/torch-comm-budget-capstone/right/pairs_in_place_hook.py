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


def halve_and_sum(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    buffer = bucket.buffer()
    half = (buffer / dist.get_world_size()).bfloat16()
    fut = dist.all_reduce(half, async_op=True).get_future()

    def write_back(done: torch.futures.Future) -> torch.Tensor:
        buffer.copy_(done.wait()[0])
        return buffer

    return fut.then(write_back)


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    dist.init_process_group("gloo")
    model = DistributedDataParallel(build_model())
    model.register_comm_hook(state=None, hook=halve_and_sum)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    sampler, loader = micro_batches(rank, world_size)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        batches = iter(loader)
        for (x1, y1), (x2, y2) in zip(batches, batches, strict=True):  # 16 micro-batches: 8 pairs
            with model.no_sync():
                (nn.functional.mse_loss(model(x1) * W_PER_KW, y1) / 2).backward()
            (nn.functional.mse_loss(model(x2) * W_PER_KW, y2) / 2).backward()
            optimizer.step()
            optimizer.zero_grad()
    dist.destroy_process_group()
    return model.module.state_dict()
