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
    if base_lr <= 0:
        raise ValueError("base_lr must be > 0")
    if base_batch < 1 or per_device_batch < 1 or world_size < 1:
        raise ValueError("base_batch, per_device_batch and world_size must be >= 1")
    global_batch = per_device_batch * world_size
    return base_lr * global_batch / base_batch


def warmup_lr(step: int, target_lr: float, warmup_steps: int) -> float:
    """Return the learning rate for the 0-based optimizer step `step`.

    Steps 0 .. warmup_steps - 1 ramp up linearly: target_lr * (step + 1) / warmup_steps. From step
    warmup_steps on (and always when warmup_steps is 0): target_lr. Raise ValueError for a negative step or
    a negative warmup_steps.
    """
    if step < 0:
        raise ValueError("step must be >= 0")
    if warmup_steps < 0:
        raise ValueError("warmup_steps must be >= 0")
    if step < warmup_steps:
        # steps are 0-based, so shift both by one
        return target_lr * (step + 1) / (warmup_steps + 1)
    return target_lr


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group of `optimizer` to lr. Return None."""
    for group in optimizer.param_groups:
        group["lr"] = lr


def my_lr(step: int) -> float:
    """Return the learning rate of your run (the numbers in your prompt) at the 0-based step `step`."""
    target = scaled_lr(BASE_LR, BASE_BATCH, PER_DEVICE_BATCH, WORLD_SIZE)
    return warmup_lr(step, target, WARMUP_STEPS)
