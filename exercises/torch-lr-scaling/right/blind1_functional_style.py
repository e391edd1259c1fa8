from functools import partial

import torch


def scaled_lr(base_lr: float, base_batch: int, per_device_batch: int, world_size: int) -> float:
    """Return the learning rate for a global batch of per_device_batch * world_size samples.

    base_lr was tuned for a batch of base_batch samples; scale it linearly with the global batch. Raise
    ValueError if base_lr <= 0 or any of the three sizes is below 1.
    """
    if base_lr <= 0 or any(n < 1 for n in (base_batch, per_device_batch, world_size)):
        raise ValueError("need base_lr > 0 and base_batch, per_device_batch, world_size >= 1")
    return base_lr * (per_device_batch * world_size / base_batch)


def warmup_lr(step: int, target_lr: float, warmup_steps: int) -> float:
    """Return the learning rate for the 0-based optimizer step `step`.

    Steps 0 .. warmup_steps - 1 ramp up linearly: target_lr * (step + 1) / warmup_steps. From step
    warmup_steps on (and always when warmup_steps is 0): target_lr. Raise ValueError for a negative step or
    a negative warmup_steps.
    """
    if min(step, warmup_steps) < 0:
        raise ValueError("step and warmup_steps must be >= 0")
    return target_lr if warmup_steps == 0 else target_lr * min(1.0, (step + 1) / warmup_steps)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group of `optimizer` to lr. Return None."""
    for group in optimizer.param_groups:
        group.update({"lr": lr})


# my run: base_lr tuned for base_batch, world_size GPUs x per_device_batch samples, then the warm-up steps
_schedule = partial(
    warmup_lr,
    target_lr=scaled_lr({{ params.base_lr }}, {{ params.base_batch }}, {{ params.per_device_batch }}, {{ params.world_size }}),
    warmup_steps={{ params.warmup_steps }},
)


def my_lr(step: int) -> float:
    """Return the learning rate of your run (the numbers in your prompt) at the 0-based step `step`."""
    return _schedule(step)
