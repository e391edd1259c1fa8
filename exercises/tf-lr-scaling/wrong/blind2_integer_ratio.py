import keras
import tensorflow as tf  # noqa: F401 - for the schedule's tensor ops


def scaled_lr(base_lr, base_batch, per_replica_batch, strategy):
    """Return base_lr scaled linearly with the global batch, per_replica_batch * strategy.num_replicas_in_sync.

    base_lr was tuned for base_batch examples per step. Raise ValueError if base_lr <= 0 or a batch size is below 1.
    """
    if base_lr <= 0:
        raise ValueError(f"base_lr must be > 0, got {base_lr}")
    if base_batch < 1 or per_replica_batch < 1:
        raise ValueError("batch sizes must be at least 1")
    global_batch = per_replica_batch * strategy.num_replicas_in_sync
    factor = global_batch // base_batch  # how many base batches fit in one global batch
    return float(base_lr * factor)


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up: target_lr * (step + 1) / warmup_steps for steps 0 .. warmup_steps - 1, then target_lr."""

    def __init__(self, target_lr, warmup_steps):
        super().__init__()
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {warmup_steps}")
        self.target_lr = target_lr
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        target = tf.constant(self.target_lr, tf.float32)
        if self.warmup_steps == 0:
            return target
        step = tf.cast(step, tf.float32)
        ramp = target * (step + 1.0) / float(self.warmup_steps)
        return tf.where(step < float(self.warmup_steps), ramp, target)

    def get_config(self):
        return {"target_lr": self.target_lr, "warmup_steps": self.warmup_steps}


def make_optimizer(strategy, base_lr, base_batch, per_replica_batch, warmup_steps):
    """Return keras.optimizers.SGD(momentum=0.9) that warms up to scaled_lr(...), created inside strategy.scope()."""
    lr = scaled_lr(base_lr, base_batch, per_replica_batch, strategy)
    with strategy.scope():
        return keras.optimizers.SGD(learning_rate=WarmupSchedule(lr, warmup_steps), momentum=0.9)
