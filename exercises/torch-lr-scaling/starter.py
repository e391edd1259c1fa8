import torch


def scaled_lr(base_lr: float, base_batch: int, per_device_batch: int, world_size: int) -> float:
    """Return the learning rate for a global batch of per_device_batch * world_size samples.

    base_lr was tuned for a batch of base_batch samples; scale it linearly with the global batch. Raise
    ValueError if base_lr <= 0 or any of the three sizes is below 1.
    """
    # TODO
    raise NotImplementedError("scaled_lr is not written yet")


def warmup_lr(step: int, target_lr: float, warmup_steps: int) -> float:
    """Return the learning rate for the 0-based optimizer step `step`.

    Steps 0 .. warmup_steps - 1 ramp up linearly: target_lr * (step + 1) / warmup_steps. From step
    warmup_steps on (and always when warmup_steps is 0): target_lr. Raise ValueError for a negative step or
    a negative warmup_steps.
    """
    # TODO
    raise NotImplementedError("warmup_lr is not written yet")


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Set the learning rate of every parameter group of `optimizer` to lr. Return None."""
    # TODO
    raise NotImplementedError("set_lr is not written yet")


def my_lr(step: int) -> float:
    """Return the learning rate of your run (the numbers in your prompt) at the 0-based step `step`."""
    # TODO: combine scaled_lr and warmup_lr with your run's numbers.
    raise NotImplementedError("my_lr is not written yet")
