import torch


def scaled_lr(base_lr: float, base_batch: int, per_device_batch: int, world_size: int) -> float:
    """Return the learning rate for a global batch of per_device_batch * world_size samples."""
    if base_lr <= 0:
        raise ValueError("base_lr must be positive")
    if base_batch < 1 or per_device_batch < 1 or world_size < 1:
        raise ValueError("batch sizes and world_size must be at least 1")
    global_batch = per_device_batch * world_size
    return base_lr * global_batch / base_batch


def warmup_lr(step: int, target_lr: float, warmup_steps: int) -> float:
    """Return the learning rate for the 0-based optimizer step `step`."""
    if step < 0:
        raise ValueError("step must be >= 0")
    if warmup_steps < 0:
        raise ValueError("warmup_steps must be >= 0")
    if step < warmup_steps:
        return target_lr * (step + 1) / warmup_steps
    return target_lr


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group of `optimizer` to lr. Return None."""
    for group in optimizer.param_groups:
        group["lr"] = lr


GLOBAL_BATCH = {{ params.world_size }} * {{ params.per_device_batch }}  # GPUs x samples per GPU


def my_lr(step: int) -> float:
    """Return the learning rate of your run (the numbers in your prompt) at the 0-based step `step`."""
    return warmup_lr(step, scaled_lr({{ params.base_lr }}, {{ params.base_batch }}, GLOBAL_BATCH, {{ params.world_size }}), {{ params.warmup_steps }})
