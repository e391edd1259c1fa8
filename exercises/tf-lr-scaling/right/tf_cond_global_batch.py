import keras
import tensorflow as tf


def global_batch_size(per_replica_batch, strategy):
    return per_replica_batch * strategy.num_replicas_in_sync


def scaled_lr(base_lr, base_batch, per_replica_batch, strategy):
    for name, value in (("base_batch", base_batch), ("per_replica_batch", per_replica_batch)):
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if base_lr <= 0:
        raise ValueError(f"base_lr must be positive, got {base_lr}")
    return base_lr / base_batch * global_batch_size(per_replica_batch, strategy)


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    def __init__(self, target_lr, warmup_steps):
        if warmup_steps < 0:
            raise ValueError("warmup_steps must be >= 0")
        self.target_lr, self.warmup_steps = target_lr, warmup_steps

    def __call__(self, step):
        step = tf.convert_to_tensor(step)
        target = tf.cast(self.target_lr, tf.float32)
        k = tf.cast(self.warmup_steps, tf.float32)
        return tf.cond(
            step < self.warmup_steps,
            lambda: target * tf.cast(step + 1, tf.float32) / k,
            lambda: target,
        )

    def get_config(self):
        return {"target_lr": self.target_lr, "warmup_steps": self.warmup_steps}


def make_optimizer(strategy, base_lr, base_batch, per_replica_batch, warmup_steps):
    with strategy.scope():
        lr = WarmupSchedule(scaled_lr(base_lr, base_batch, per_replica_batch, strategy), warmup_steps)
        return keras.optimizers.SGD(lr, momentum=0.9)
