from fractions import Fraction

import torch


def scaled_lr(base_lr, base_batch, per_device_batch, world_size):
    if not base_lr > 0 or min(base_batch, per_device_batch, world_size) < 1:
        raise ValueError("base_lr must be positive and the sizes at least 1")
    factor = Fraction(per_device_batch * world_size, base_batch)  # exact ratio of global to base batch
    return base_lr * float(factor)


def warmup_lr(step, target_lr, warmup_steps):
    if step < 0 or warmup_steps < 0:
        raise ValueError("negative step or warmup_steps")
    if warmup_steps == 0:
        return target_lr
    return target_lr * min(1.0, (step + 1) / warmup_steps)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for i in range(len(optimizer.param_groups)):
        optimizer.param_groups[i].update(lr=lr)


def my_lr(step):
    # The whole schedule in one expression, with exact fractions until the end.
    target = Fraction(str({{ params.base_lr }})) * {{ params.per_device_batch }} * {{ params.world_size }} / {{ params.base_batch }}
    return float(target * min(1, Fraction(step + 1, {{ params.warmup_steps }})))
