import math

import torch

BASE_LR = {{ params.base_lr }}
BASE_BATCH = {{ params.base_batch }}
WORLD_SIZE = {{ params.world_size }}
PER_DEVICE_BATCH = {{ params.per_device_batch }}
WARMUP_STEPS = {{ params.warmup_steps }}


def scaled_lr(base_lr: float, base_batch: int, per_device_batch: int, world_size: int) -> float:
    """Return the learning rate for a global batch of per_device_batch * world_size samples.

    base_lr was tuned for a batch of base_batch samples; scale it linearly with the global batch. Raise
    ValueError if base_lr <= 0 or any of the three sizes is below 1.
    """
    # written as "not (... )" so that NaN is rejected too
    if not (base_lr > 0) or not math.isfinite(base_lr):
        raise ValueError(f"base_lr must be a finite number > 0, got {base_lr!r}")
    sizes = {"base_batch": base_batch, "per_device_batch": per_device_batch, "world_size": world_size}
    for name, value in sizes.items():
        if not (value >= 1):
            raise ValueError(f"{name} must be >= 1, got {value!r}")
    global_batch = per_device_batch * world_size
    lr = float(base_lr) * global_batch / base_batch
    assert lr > 0
    return lr


def warmup_lr(step: int, target_lr: float, warmup_steps: int) -> float:
    """Return the learning rate for the 0-based optimizer step `step`.

    Steps 0 .. warmup_steps - 1 ramp up linearly: target_lr * (step + 1) / warmup_steps. From step
    warmup_steps on (and always when warmup_steps is 0): target_lr. Raise ValueError for a negative step or
    a negative warmup_steps.
    """
    if not (step >= 0):
        raise ValueError(f"step must be >= 0, got {step!r}")
    if not (warmup_steps >= 0):
        raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps!r}")
    if 0 <= step < warmup_steps:
        return float(target_lr) * (step + 1) / warmup_steps
    return float(target_lr)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group of `optimizer` to lr. Return None."""
    groups = getattr(optimizer, "param_groups", None)
    if groups is None:
        raise TypeError(f"expected a torch optimizer, got {type(optimizer).__name__}")
    for group in groups:
        if "lr" not in group:
            raise KeyError("parameter group without an 'lr' entry")
        group["lr"] = lr
    # make sure it really took effect everywhere
    assert all(g["lr"] == lr for g in groups)
    return None


def my_lr(step: int) -> float:
    """Return the learning rate of your run (the numbers in your prompt) at the 0-based step `step`."""
    target = scaled_lr(BASE_LR, BASE_BATCH, PER_DEVICE_BATCH, WORLD_SIZE)
    return warmup_lr(step, target, WARMUP_STEPS)
