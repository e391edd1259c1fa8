import torch
import torch.distributed as dist  # noqa: F401 - dist.all_reduce and the process group
from torch import nn


def average_gradients(model: nn.Module, world_size: int) -> None:
    """Average every parameter's .grad across all ranks, in place, as DistributedDataParallel does.

    Call it after loss.backward() and before optimizer.step(). The default process group is already
    initialised. Parameters whose .grad is None are skipped. Returns None.
    """
    # TODO
    raise NotImplementedError("average_gradients is not written yet")


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Train the prompt's model as rank `rank` of `world_size` processes, without DistributedDataParallel.

    Initialise a gloo process group, seed with torch.manual_seed(0) and build
    nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)); train 10 epochs on this rank's block of the
    prompt's 64 samples (x.chunk(world_size)[rank]), batches of 8 in order, MSE loss, SGD lr=0.1, calling
    average_gradients between backward and step; destroy the process group and return model.state_dict().
    """
    # TODO
    raise NotImplementedError("train is not written yet")
