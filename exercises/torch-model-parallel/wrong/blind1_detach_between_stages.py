import torch
from torch import nn


class TwoStage(nn.Module):
    def __init__(self, stage0: nn.Module, stage1: nn.Module):
        super().__init__()
        self.stage0 = stage0.to("cuda:0")
        self.stage1 = stage1.to("cuda:1")

    def forward(self, x):
        h = self.stage0(x)
        h = h.detach().to("cuda:1")
        return self.stage1(h)


def split_model(model: nn.Sequential) -> nn.Module:
    """Return `model` split in two stages: model[:4] on cuda:0, model[4:] on cuda:1."""
    return TwoStage(model[:4], model[4:])


def train(pipe: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float) -> list[float]:
    """Train `pipe` on the batch (x, y) for `steps` steps; return each loss."""
    x = x.to("cuda:0")
    y = y.to("cuda:1")
    optimizer = torch.optim.SGD(pipe.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        out = pipe(x)
        loss = nn.functional.cross_entropy(out, y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses
