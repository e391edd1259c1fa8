import torch
from torch import nn


class MoveTo(nn.Module):
    """A parameter-free layer that hands its input over to another device."""

    def __init__(self, device: str):
        super().__init__()
        self.device = torch.device(device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(self.device)

    def extra_repr(self) -> str:
        return f"device={self.device}"


def split_model(model: nn.Sequential) -> nn.Module:
    """Return `model` split in two stages: model[:4] on cuda:0, model[4:] on cuda:1."""
    stage0 = model[:4]
    stage1 = model[4:]
    stage0.to("cuda:0")
    stage1.to("cuda:1")
    return nn.Sequential(stage0, MoveTo("cuda:1"), stage1)


def train(pipe: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float) -> list[float]:
    """Train `pipe` on the batch (x, y) for `steps` steps; return each loss."""
    first_device = next(pipe[0].parameters()).device
    x = x.to(first_device)
    optimizer = torch.optim.SGD(pipe.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        out = pipe(x)
        loss = nn.functional.cross_entropy(out, y.to(out.device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses
