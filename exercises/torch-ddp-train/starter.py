import torch
import torch.distributed as dist  # noqa: F401 - what you will need
from torch import nn  # noqa: F401
from torch.nn.parallel import DistributedDataParallel  # noqa: F401
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset  # noqa: F401


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    """Train nn.Linear(4, 1) with DistributedDataParallel as rank `rank` of `world_size` processes.

    Initialise the default process group (gloo on CPU, nccl with CUDA; MASTER_ADDR and MASTER_PORT are set),
    seed and build the model, wrap it in DistributedDataParallel, train on the prompt's 64 samples sharded
    with a DistributedSampler, destroy the process group, and return the unwrapped model's state_dict.
    """
    # TODO
    raise NotImplementedError("train is not written yet")
