import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

N_SAMPLES, FEATURES, CLASSES, BATCH, EPOCHS, LR = 512, 16, 4, 32, 3, 0.01


def make_data() -> tuple[torch.Tensor, torch.Tensor]:
    """The 512 samples: four Gaussian clusters in 16 dimensions, from seed 7. Do not change."""
    g = torch.Generator().manual_seed(7)
    centers = torch.randn(CLASSES, FEATURES, generator=g) * 1.2
    y = torch.randint(0, CLASSES, (N_SAMPLES,), generator=g)
    return centers[y] + torch.randn(N_SAMPLES, FEATURES, generator=g), y


def build_model() -> nn.Module:
    """The model, from seed 0. Do not change."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, CLASSES))


def loader(rank: int, world_size: int) -> DataLoader:
    """This rank's batches of BATCH samples, in order (256 samples, 8 batches per epoch). Do not change."""
    dataset = TensorDataset(*make_data())
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    return DataLoader(dataset, batch_size=BATCH, sampler=sampler)


class MixedPrecisionTrainer:
    def __init__(self, rank, world_size):
        self.rank, self.world_size = rank, world_size
        self.model = DistributedDataParallel(build_model())
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=LR)
        self.autocast_kwargs = {"device_type": "cpu", "dtype": torch.bfloat16}

    def step(self, x, y):
        self.optimizer.zero_grad()
        with torch.autocast(**self.autocast_kwargs):
            logits = self.model(x)
            if logits.dtype != torch.bfloat16:
                raise RuntimeError("autocast is not active")
            loss = F.cross_entropy(logits, y)
        loss.backward()
        if any(p.dtype != torch.float32 for p in self.model.parameters()):
            raise RuntimeError("master weights must stay float32")
        self.optimizer.step()

    def fit(self):
        for _ in range(EPOCHS):
            for x, y in loader(self.rank, self.world_size):
                self.step(x, y)
        return self.model.module.state_dict()


def train(rank: int, world_size: int) -> dict[str, torch.Tensor]:
    dist.init_process_group("gloo")
    try:
        state = MixedPrecisionTrainer(rank, world_size).fit()
    finally:
        dist.destroy_process_group()
    return state
