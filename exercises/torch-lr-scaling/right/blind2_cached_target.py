import functools

import torch


def scaled_lr(base_lr: float, base_batch: int, per_device_batch: int, world_size: int) -> float:
    """Return the learning rate for a global batch of per_device_batch * world_size samples."""
    if base_lr <= 0 or min(base_batch, per_device_batch, world_size) < 1:
        raise ValueError(
            f"invalid arguments: base_lr={base_lr}, base_batch={base_batch}, "
            f"per_device_batch={per_device_batch}, world_size={world_size}"
        )
    k = float(per_device_batch * world_size) / float(base_batch)
    return base_lr * k


def warmup_lr(step: int, target_lr: float, warmup_steps: int) -> float:
    """Return the learning rate for the 0-based optimizer step `step`."""
    if step < 0 or warmup_steps < 0:
        raise ValueError("step and warmup_steps must be >= 0")
    if step >= warmup_steps:  # also covers warmup_steps == 0
        return target_lr
    fraction = (step + 1) / warmup_steps
    return target_lr * fraction


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group of `optimizer` to lr. Return None."""
    groups = optimizer.param_groups
    if not groups:
        raise ValueError("optimizer has no parameter groups")
    for group in groups:
        if "lr" not in group:
            raise KeyError("parameter group without an 'lr' entry")
        group["lr"] = lr


@functools.lru_cache(maxsize=1)
def _my_target_lr() -> float:
    # the global batch (GPUs x samples per GPU) relative to the tuned batch
    return scaled_lr(base_lr={{ params.base_lr }}, base_batch={{ params.base_batch }}, per_device_batch={{ params.per_device_batch }}, world_size={{ params.world_size }})


def my_lr(step: int) -> float:
    """Return the learning rate of your run (the numbers in your prompt) at the 0-based step `step`."""
    return warmup_lr(step, _my_target_lr(), warmup_steps={{ params.warmup_steps }})
