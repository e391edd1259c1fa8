import math

import keras
import tensorflow as tf


def scaled_lr(base_lr, base_batch, per_replica_batch, strategy):
    """Return base_lr scaled linearly with the global batch, per_replica_batch * strategy.num_replicas_in_sync.

    base_lr was tuned for base_batch examples per step. Raise ValueError if base_lr <= 0 or a batch size is below 1.
    """
    if base_lr <= 0:
        raise ValueError("base_lr must be > 0")
    if base_batch < 1:
        raise ValueError("base_batch must be >= 1")
    if per_replica_batch < 1:
        raise ValueError("per_replica_batch must be >= 1")
    replicas = int(strategy.num_replicas_in_sync)
    global_batch = per_replica_batch * replicas
    lr = base_lr * global_batch / base_batch
    if not math.isfinite(lr):
        raise ValueError(f"scaled learning rate is not finite: {lr}")
    return float(lr)


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up: target_lr * (step + 1) / warmup_steps for steps 0 .. warmup_steps - 1, then target_lr."""

    def __init__(self, target_lr, warmup_steps):
        super().__init__()
        if warmup_steps < 0:
            raise ValueError(f"negative warmup_steps: {warmup_steps}")
        self.target_lr = target_lr
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        step = tf.cast(step, tf.int64)
        steps_done = step + 1                                   # int64: exact comparison
        in_warmup = steps_done < self.warmup_steps
        denom = tf.cast(tf.maximum(self.warmup_steps, 1), tf.float32)
        ramp = self.target_lr * tf.cast(steps_done, tf.float32) / denom
        lr = tf.where(in_warmup, ramp, tf.constant(self.target_lr, tf.float32))
        return tf.reshape(lr, [])

    def get_config(self):
        return {"target_lr": float(self.target_lr), "warmup_steps": int(self.warmup_steps)}


def make_optimizer(strategy, base_lr, base_batch, per_replica_batch, warmup_steps):
    """Return keras.optimizers.SGD(momentum=0.9) that warms up to scaled_lr(...), created inside strategy.scope()."""
    with strategy.scope():
        return keras.optimizers.SGD(
            learning_rate=WarmupSchedule(
                scaled_lr(base_lr, base_batch, per_replica_batch, strategy), warmup_steps
            ),
            momentum=0.9,
        )
