from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class RunConfig:
    base_lr: float = {{ params.base_lr }}
    base_batch: int = {{ params.base_batch }}
    per_device_batch: int = {{ params.per_device_batch }}
    world_size: int = {{ params.world_size }}
    warmup_steps: int = {{ params.warmup_steps }}

    @property
    def global_batch(self) -> int:
        return self.per_device_batch * self.world_size


RUN = RunConfig()


def scaled_lr(base_lr: float, base_batch: int, per_device_batch: int, world_size: int) -> float:
    """Return the learning rate for a global batch of per_device_batch * world_size samples."""
    if base_lr <= 0:
        raise ValueError("base_lr must be > 0")
    for name, value in (("base_batch", base_batch), ("per_device_batch", per_device_batch), ("world_size", world_size)):
        if value < 1:
            raise ValueError(f"{name} must be >= 1")
    # same rule, written as lr per sample times samples per step
    return base_lr / base_batch * (per_device_batch * world_size)


def warmup_lr(step: int, target_lr: float, warmup_steps: int) -> float:
    """Return the learning rate for the 0-based optimizer step `step`."""
    if step < 0:
        raise ValueError("negative step")
    if warmup_steps < 0:
        raise ValueError("negative warmup_steps")
    in_warmup = step < warmup_steps
    return target_lr * (step + 1) / warmup_steps if in_warmup else float(target_lr)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group of `optimizer` to lr. Return None."""
    for i in range(len(optimizer.param_groups)):
        optimizer.param_groups[i]["lr"] = lr
    return None


def my_lr(step: int) -> float:
    """Return the learning rate of your run (the numbers in your prompt) at the 0-based step `step`."""
    target = scaled_lr(RUN.base_lr, RUN.base_batch, RUN.per_device_batch, RUN.world_size)
    return warmup_lr(step, target, RUN.warmup_steps)
