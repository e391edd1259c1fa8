import contextlib  # noqa: F401  (contextlib.nullcontext() is handy for "no context manager")
from contextlib import ExitStack

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


WINDOW = 2  # micro-batches per optimizer step


class BF16AllReduce:
    """A DDP communication hook as a callable object: bfloat16 on the wire, float32 mean back to DDP."""

    def __init__(self, group: dist.ProcessGroup | None = None) -> None:
        self.group = group if group is not None else dist.group.WORLD
        self.world = dist.get_world_size(self.group)
        self.calls = 0

    def __call__(self, state: object, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        self.calls += 1
        send = bucket.buffer().to(dtype=torch.bfloat16)
        work = dist.all_reduce(send, op=dist.ReduceOp.SUM, group=self.group, async_op=True)
        return work.get_future().then(lambda f: f.value()[0].float().div_(self.world))


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Train build_model() with DDP and Adam (LR) for EPOCHS epochs of every micro-batch; return rank's weights.

    Windows of WINDOW micro-batches (all but the last under no_sync) and a bfloat16 hook: 1/4 of plain DDP's bytes.
    """
    dist.init_process_group("gloo")
    assert dist.get_world_size() == world_size and dist.get_rank() == rank
    model = DistributedDataParallel(build_model())
    hook = BF16AllReduce()
    model.register_comm_hook(None, hook)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR)
    sampler, loader = micro_batches(rank, world_size)
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)
        batches = list(loader)
        windows = [batches[j : j + WINDOW] for j in range(0, len(batches), WINDOW)]
        epoch_loss = 0.0
        for window in windows:
            optimizer.zero_grad(set_to_none=True)
            for k, (xb, yb) in enumerate(window):
                with ExitStack() as stack:
                    if k < len(window) - 1:
                        stack.enter_context(model.no_sync())
                    loss = nn.functional.mse_loss(model(xb) * W_PER_KW, yb) / len(window)
                    loss.backward()
                epoch_loss += loss.item()
            optimizer.step()
        if rank == 0:
            print(f"epoch {epoch}: local loss {epoch_loss / len(windows):.0f} W^2, hook calls so far {hook.calls}")
    dist.destroy_process_group()
    return model.module.state_dict()
