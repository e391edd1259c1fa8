import torch
from torch import nn

DEVICES = (torch.device("cuda:0"), torch.device("cuda:1"))


class StagedModel(nn.Module):
    """A generic pipeline of stages, each living on its own device."""

    def __init__(self, stages: list[nn.Module], devices) -> None:
        super().__init__()
        assert len(stages) == len(devices), "one device per stage"
        self.devices = list(devices)
        self.stages = nn.ModuleList(stage.to(dev) for stage, dev in zip(stages, self.devices, strict=True))

    @property
    def output_device(self) -> torch.device:
        return self.devices[-1]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for stage, dev in zip(self.stages, self.devices, strict=True):
            if x.device != dev:
                x = x.to(dev)
            x = stage(x)
        return x


def split_model(model: nn.Sequential) -> nn.Module:
    """Return `model` split in two stages: model[:4] on cuda:0, model[4:] on cuda:1."""
    if len(model) != 7:
        raise ValueError(f"expected 7 modules, got {len(model)}")
    return StagedModel([model[:4], model[4:]], DEVICES)


def train(pipe: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float) -> list[float]:
    """Train `pipe` on the batch (x, y) for `steps` steps; return each loss."""
    x = x.to(DEVICES[0])
    y = y.to(pipe.output_device)
    optimizer = torch.optim.SGD(pipe.parameters(), lr=lr)
    losses: list[float] = []
    step = 0
    while step < steps:
        pipe.zero_grad()
        loss = nn.functional.cross_entropy(pipe(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().cpu().item())
        print(f"step {step}: loss {losses[-1]:.4f}")
        step += 1
    return losses
