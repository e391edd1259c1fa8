"""Probes for torch-ddp-eval: run the learner's evaluate(rank, world_size) in real processes over gloo
(runner.vdev.ddp) and report what each rank returned, plus how many samples it ran through the model.

Observations (forgeable by a learner who patches this file, like every probe's; the tests compare the returned
counts with the ones they compute themselves, which cannot be forged without evaluating exactly):
- the rows that went through each model build_model() returned on the rank (a forward pre-hook on it);
- how many times the rank called build_model().
The returned numbers travel as float64 tensors, so a learner may return ints, floats or tensors. The hidden tests
import the data, the model and the constants from here.
"""

from collections.abc import Mapping

import torch
from torch import nn

# Warm the subject before it forks per-test children, so ranks start in ~0.1 s instead of seconds.
import torch._dynamo  # noqa: E402,F401

torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)

# The prompt's and the starter's settings.
N_VAL, FEATURES, CLASSES, BATCH = 101, 8, 3, 16
PREFIX = "__probe__."
KEYS = ("correct", "total", "accuracy")


def _classifier() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(FEATURES, 16), nn.ReLU(), nn.Linear(16, CLASSES))


def build_model() -> nn.Module:
    """The starter's trained classifier: weights from seed 0."""
    return _classifier()


def make_val_data() -> tuple[torch.Tensor, torch.Tensor]:
    """The starter's 101 validation samples: x from seed 22; labels the model's predictions, 40% replaced at random."""
    g = torch.Generator().manual_seed(22)
    x = torch.randn(N_VAL, FEATURES, generator=g)
    with torch.no_grad():
        predicted = _classifier()(x).argmax(dim=1)
    noise = torch.randint(0, CLASSES, (N_VAL,), generator=g)
    flip = torch.rand(N_VAL, generator=g) < 0.4
    return x, torch.where(flip, noise, predicted)


def _number(name: str, value) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise TypeError(f"evaluate returned a tensor of shape {list(value.shape)} for {name!r}; expected one number")
        return value.detach().reshape(()).to(torch.float64)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.tensor(float(value), dtype=torch.float64)
    raise TypeError(f"evaluate returned {type(value).__name__} for {name!r}; expected a number or a 0-dim tensor")


def run(submission, world_size: int = 2, timeout_s: float = 40.0) -> list:
    """Run submission.evaluate on world_size ranks; return each rank's RankResult.plain() with observations."""
    from runner.vdev import ddp

    def evaluate(rank: int, ws: int):
        seen = {"rows": 0, "built": 0}
        original = submission.build_model

        def count_rows(module, args):
            first = args[0] if args else None
            if isinstance(first, torch.Tensor) and first.dim() > 0:
                seen["rows"] += int(first.shape[0])

        def counted_build_model(*args, **kwargs):
            model = original(*args, **kwargs)
            seen["built"] += 1
            if isinstance(model, nn.Module):
                model.register_forward_pre_hook(count_rows)
            return model

        submission.build_model = counted_build_model
        got = submission.evaluate(rank, ws)
        if not isinstance(got, Mapping):
            raise TypeError(f"evaluate must return a dict with keys {list(KEYS)}, not {type(got).__name__}")
        out = {str(k): _number(str(k), v) for k, v in got.items() if k in KEYS}
        out[PREFIX + "rows"] = torch.tensor(seen["rows"])
        out[PREFIX + "built"] = torch.tensor(seen["built"])
        return out

    return [r.plain() for r in ddp.run(evaluate, world_size=world_size, timeout_s=timeout_s)]
