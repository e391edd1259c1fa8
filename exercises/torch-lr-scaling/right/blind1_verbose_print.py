import torch

BASE_LR = {{ params.base_lr }}
BASE_BATCH = {{ params.base_batch }}
WORLD_SIZE = {{ params.world_size }}
PER_DEVICE_BATCH = {{ params.per_device_batch }}
WARMUP_STEPS = {{ params.warmup_steps }}

VERBOSE = True


def _log(*args) -> None:
    if VERBOSE:
        print("[lr]", *args)


def scaled_lr(base_lr: float, base_batch: int, per_device_batch: int, world_size: int) -> float:
    """Return the learning rate for a global batch of per_device_batch * world_size samples.

    base_lr was tuned for a batch of base_batch samples; scale it linearly with the global batch. Raise
    ValueError if base_lr <= 0 or any of the three sizes is below 1.
    """
    problems = []
    if base_lr <= 0:
        problems.append(f"base_lr={base_lr} (must be > 0)")
    if base_batch < 1:
        problems.append(f"base_batch={base_batch} (must be >= 1)")
    if per_device_batch < 1:
        problems.append(f"per_device_batch={per_device_batch} (must be >= 1)")
    if world_size < 1:
        problems.append(f"world_size={world_size} (must be >= 1)")
    if problems:
        raise ValueError("invalid arguments: " + ", ".join(problems))

    global_batch = per_device_batch * world_size
    lr = base_lr * global_batch / base_batch
    _log(f"global batch {per_device_batch} x {world_size} = {global_batch}, "
         f"k = {global_batch / base_batch:.4g}, lr {base_lr} -> {lr}")
    return lr


def warmup_lr(step: int, target_lr: float, warmup_steps: int) -> float:
    """Return the learning rate for the 0-based optimizer step `step`.

    Steps 0 .. warmup_steps - 1 ramp up linearly: target_lr * (step + 1) / warmup_steps. From step
    warmup_steps on (and always when warmup_steps is 0): target_lr. Raise ValueError for a negative step or
    a negative warmup_steps.
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if warmup_steps < 0:
        raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
    if warmup_steps == 0:
        return target_lr
    if step >= warmup_steps:
        return target_lr
    lr = target_lr * (step + 1) / warmup_steps
    _log(f"warm-up step {step + 1}/{warmup_steps}: {lr}")
    return lr


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group of `optimizer` to lr. Return None."""
    for i, group in enumerate(optimizer.param_groups):
        old = group["lr"]
        group["lr"] = lr
        _log(f"param group {i}: lr {old} -> {lr}")


def my_lr(step: int) -> float:
    """Return the learning rate of your run (the numbers in your prompt) at the 0-based step `step`."""
    target = scaled_lr(BASE_LR, BASE_BATCH, PER_DEVICE_BATCH, WORLD_SIZE)
    lr = warmup_lr(step, target, WARMUP_STEPS)
    _log(f"my_lr({step}) = {lr}")
    return lr


if __name__ == "__main__":
    print([warmup_lr(s, 0.4, 4) for s in range(6)])
    print(scaled_lr(0.1, 256, 64, 8), scaled_lr(0.1, 256, 64, 2))
