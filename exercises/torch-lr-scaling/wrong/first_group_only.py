import torch


def scaled_lr(base_lr: float, base_batch: int, per_device_batch: int, world_size: int) -> float:
    """Linear scaling rule: the learning rate grows with the global batch, relative to the tuned base batch."""
    if base_lr <= 0:
        raise ValueError(f"base_lr must be positive, got {base_lr}")
    for name, value in (("base_batch", base_batch), ("per_device_batch", per_device_batch), ("world_size", world_size)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    global_batch = per_device_batch * world_size
    return base_lr * global_batch / base_batch


def warmup_lr(step: int, target_lr: float, warmup_steps: int) -> float:
    """Learning rate for 0-based optimizer step `step`: a linear ramp to target_lr over warmup_steps steps."""
    if step < 0 or warmup_steps < 0:
        raise ValueError(f"step and warmup_steps must not be negative, got {step} and {warmup_steps}")
    if step >= warmup_steps:
        return target_lr
    return target_lr * (step + 1) / warmup_steps


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group of `optimizer`."""
    optimizer.param_groups[0]["lr"] = lr


def my_lr(step: int) -> float:
    target = scaled_lr({{ params.base_lr }}, {{ params.base_batch }}, {{ params.per_device_batch }}, {{ params.world_size }})
    return warmup_lr(step, target, {{ params.warmup_steps }})
