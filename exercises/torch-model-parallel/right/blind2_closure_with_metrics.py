import torch
from torch import nn


class Split(nn.Module):
    def __init__(self, model: nn.Sequential):
        super().__init__()
        self.part1 = model[:4]
        self.part2 = model[4:]
        self.part1.to("cuda:0")
        self.part2.to("cuda:1")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.part2(self.part1(x).to("cuda:1"))


def split_model(model: nn.Sequential) -> nn.Module:
    pipe = Split(model)
    # sanity check: every parameter is on one of the two GPUs, none left on the CPU
    for name, p in pipe.named_parameters():
        assert p.device.type == "cuda", f"{name} is on {p.device}"
    return pipe


def train(pipe: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, lr: float) -> list[float]:
    x0 = x.to("cuda:0")
    y1 = y.to("cuda:1")
    optimizer = torch.optim.SGD(pipe.parameters(), lr=lr)

    def closure():
        optimizer.zero_grad()
        out = pipe(x0)
        loss = nn.functional.cross_entropy(out, y1)
        loss.backward()
        with torch.no_grad():  # metric only, computed from the same forward
            acc = (out.argmax(dim=1) == y1).float().mean().item()
        print(f"loss {loss.item():.4f}  acc {acc:.3f}")
        return loss

    losses = []
    for _ in range(steps):
        loss = optimizer.step(closure)
        losses.append(loss.item())
    return losses
