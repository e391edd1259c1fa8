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


class Bf16Average:
    """A comm hook that averages each bucket over the ranks in bfloat16."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size

    def __call__(self, state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        flat = bucket.buffer()
        sent = flat.to(torch.bfloat16)
        work = dist.all_reduce(sent, async_op=True)

        def back(fut: torch.futures.Future) -> torch.Tensor:
            return fut.value()[0].to(torch.float32).div_(self.world_size)

        return work.get_future().then(back)


WINDOW = 3  # windows of 3, 3, 3, 3, 3 and 1 micro-batches: 6 all-reduces per epoch


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    dist.init_process_group("gloo")
    model = DistributedDataParallel(build_model())
    average = Bf16Average(world_size)

    def bf16_average(state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        return average(state, bucket)

    model.register_comm_hook(None, bf16_average)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    sampler, loader = micro_batches(rank, world_size)
    batches = len(loader)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        for i, (xb, yb) in enumerate(loader):
            start = i - i % WINDOW
            size = min(WINDOW, batches - start)
            closes = i == start + size - 1
            if closes:
                (nn.functional.mse_loss(model(xb) * W_PER_KW, yb) / size).backward()
                optimizer.step()
                optimizer.zero_grad()
            else:
                with model.no_sync():
                    (nn.functional.mse_loss(model(xb) * W_PER_KW, yb) / size).backward()
    dist.destroy_process_group()
    return model.module.state_dict()
