import keras
import tensorflow as tf  # noqa: F401 - for the schedule's tensor ops


def _global_batch(per_replica_batch, strategy):
    return per_replica_batch * int(strategy.num_replicas_in_sync)


def scaled_lr(base_lr, base_batch, per_replica_batch, strategy):
    """Return base_lr scaled linearly with the global batch, per_replica_batch * strategy.num_replicas_in_sync.

    base_lr was tuned for base_batch examples per step. Raise ValueError if base_lr <= 0 or a batch size is below 1.
    """
    errors = []
    if base_lr <= 0:
        errors.append("base_lr must be > 0")
    if base_batch < 1:
        errors.append("base_batch must be >= 1")
    if per_replica_batch < 1:
        errors.append("per_replica_batch must be >= 1")
    if errors:
        raise ValueError("; ".join(errors))
    scale = _global_batch(per_replica_batch, strategy) / float(base_batch)
    return base_lr * scale


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up: target_lr * (step + 1) / warmup_steps for steps 0 .. warmup_steps - 1, then target_lr."""

    def __init__(self, target_lr, warmup_steps):
        if warmup_steps < 0:
            raise ValueError("warmup_steps must be >= 0")
        self.target_lr = target_lr
        self.warmup_steps = warmup_steps
        # per-step increment of the ramp, guarded against warmup_steps == 0
        self._increment = target_lr / warmup_steps if warmup_steps > 0 else target_lr

    def __call__(self, step):
        step_f = tf.cast(step, tf.float32)
        ramp = tf.cast(self._increment, tf.float32) * (step_f + 1.0)
        return tf.math.minimum(ramp, tf.cast(self.target_lr, tf.float32))

    def get_config(self):
        return {"target_lr": self.target_lr, "warmup_steps": self.warmup_steps}


def make_optimizer(strategy, base_lr, base_batch, per_replica_batch, warmup_steps):
    """Return keras.optimizers.SGD(momentum=0.9) that warms up to scaled_lr(...), created inside strategy.scope()."""
    target_lr = scaled_lr(base_lr, base_batch, per_replica_batch, strategy)
    schedule = WarmupSchedule(target_lr, warmup_steps)  # a plain Python object, no variables
    with strategy.scope():
        optimizer = keras.optimizers.SGD(learning_rate=schedule, momentum=0.9, nesterov=False)
    return optimizer
