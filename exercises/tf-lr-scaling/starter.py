import keras
import tensorflow as tf  # noqa: F401 - for the schedule's tensor ops


def scaled_lr(base_lr, base_batch, per_replica_batch, strategy):
    """Return base_lr scaled linearly with the global batch, per_replica_batch * strategy.num_replicas_in_sync.

    base_lr was tuned for base_batch examples per step. Raise ValueError if base_lr <= 0 or a batch size is below 1.
    """
    # TODO
    raise NotImplementedError("scaled_lr is not written yet")


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up: target_lr * (step + 1) / warmup_steps for steps 0 .. warmup_steps - 1, then target_lr."""

    def __init__(self, target_lr, warmup_steps):
        # TODO: keep the arguments; raise ValueError for a negative warmup_steps
        raise NotImplementedError("WarmupSchedule is not written yet")

    def __call__(self, step):
        # TODO: `step` is an integer scalar tensor (symbolic inside model.fit): use tensor ops, return a float tensor
        raise NotImplementedError("WarmupSchedule.__call__ is not written yet")

    def get_config(self):
        # TODO: what WarmupSchedule(**config) needs to rebuild this schedule
        raise NotImplementedError("WarmupSchedule.get_config is not written yet")


def make_optimizer(strategy, base_lr, base_batch, per_replica_batch, warmup_steps):
    """Return keras.optimizers.SGD(momentum=0.9) that warms up to scaled_lr(...), created inside strategy.scope()."""
    # TODO
    raise NotImplementedError("make_optimizer is not written yet")
