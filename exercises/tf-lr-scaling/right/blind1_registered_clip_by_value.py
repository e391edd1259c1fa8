import keras
import tensorflow as tf


def scaled_lr(base_lr, base_batch, per_replica_batch, strategy):
    """Return base_lr scaled linearly with the global batch, per_replica_batch * strategy.num_replicas_in_sync.

    base_lr was tuned for base_batch examples per step. Raise ValueError if base_lr <= 0 or a batch size is below 1.
    """
    if base_lr <= 0 or min(base_batch, per_replica_batch) < 1:
        raise ValueError(
            f"invalid arguments: base_lr={base_lr}, base_batch={base_batch}, per_replica_batch={per_replica_batch}"
        )
    global_batch = per_replica_batch * strategy.num_replicas_in_sync
    return base_lr * (global_batch / base_batch)


@keras.saving.register_keras_serializable(package="lr_scaling")
class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up: target_lr * (step + 1) / warmup_steps for steps 0 .. warmup_steps - 1, then target_lr."""

    def __init__(self, target_lr, warmup_steps):
        if warmup_steps < 0:
            raise ValueError("warmup_steps must be >= 0")
        self.target_lr = target_lr
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        target = tf.convert_to_tensor(self.target_lr, dtype=tf.float32)
        if not self.warmup_steps:  # a Python int fixed at construction, not the step tensor
            return target
        progress = (tf.cast(step, tf.float32) + 1.0) / float(self.warmup_steps)
        return target * tf.clip_by_value(progress, 0.0, 1.0)

    def get_config(self):
        config = {}
        config["target_lr"] = self.target_lr
        config["warmup_steps"] = self.warmup_steps
        return config


def make_optimizer(strategy, base_lr, base_batch, per_replica_batch, warmup_steps):
    """Return keras.optimizers.SGD(momentum=0.9) that warms up to scaled_lr(...), created inside strategy.scope()."""
    lr = scaled_lr(base_lr, base_batch, per_replica_batch, strategy)
    with strategy.scope():
        opt = keras.optimizers.SGD(learning_rate=WarmupSchedule(lr, warmup_steps), momentum=0.9, nesterov=False)
    assert opt.iterations.dtype == tf.int64
    return opt
