import torch
from torch import nn


class TwoStage(nn.Module):
    """model[:4] on cuda:0, model[4:] on cuda:1; the activation crosses once, at the split."""

    def __init__(self, model: nn.Sequential) -> None:
        super().__init__()
        self.first = model[:4].to("cuda:0")  # the same layer objects, moved in place
        self.second = model[4:].to("cuda:1")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.first(x.to("cuda:0"))
        return self.second(h.to("cuda:1"))  # the activation follows the layers, not the other way round


def split_model(model: nn.Sequential) -> nn.Module:
    """Return `model` split in two stages: model[:4] on cuda:0, model[4:] on cuda:1."""
    return TwoStage(model).cuda()  # make sure the whole model is on the GPU


def train(pipe: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float) -> list[float]:
    """Train `pipe` with SGD on the CPU batch (x, y) for `steps` steps; return each step's loss."""
    optimizer = torch.optim.SGD(pipe.parameters(), lr=lr)  # one optimizer over both stages
    x, y = x.to("cuda:0"), y.to("cuda:1")  # inputs where the first stage is, targets where the output is
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(pipe(x), y)
        loss.backward()  # autograd carries the gradient back across the split
        optimizer.step()
        losses.append(loss.item())
    return losses
