import keras
import tensorflow as tf  # noqa: F401 - for the schedule's tensor ops


def scaled_lr(base_lr, base_batch, per_replica_batch, strategy):
    """Return base_lr scaled linearly with the global batch, per_replica_batch * strategy.num_replicas_in_sync.

    base_lr was tuned for base_batch examples per step. Raise ValueError if base_lr <= 0 or a batch size is below 1.
    """
    if not base_lr > 0:
        raise ValueError("base_lr must be positive")
    if min(base_batch, per_replica_batch) < 1:
        raise ValueError("base_batch and per_replica_batch must be >= 1")
    global_batch = per_replica_batch * strategy.num_replicas_in_sync
    lr = base_lr / base_batch * global_batch
    print(f"[scaled_lr] global batch {global_batch} (base {base_batch}): lr {base_lr} -> {lr}")
    return float(lr)


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up: target_lr * (step + 1) / warmup_steps for steps 0 .. warmup_steps - 1, then target_lr."""

    def __init__(self, target_lr, warmup_steps):
        super().__init__()
        if warmup_steps < 0:
            raise ValueError("negative warmup_steps")
        self.target_lr = target_lr
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        step = tf.convert_to_tensor(step)
        target = tf.convert_to_tensor(self.target_lr, dtype=tf.float32)
        warmup = tf.constant(self.warmup_steps, dtype=step.dtype)

        def ramp():
            done = tf.cast(step + 1, tf.float32)
            return target * done / tf.cast(warmup, tf.float32)

        return tf.cond(step < warmup, ramp, lambda: target)

    def get_config(self):
        config = {}
        config["target_lr"] = self.target_lr
        config["warmup_steps"] = self.warmup_steps
        return config


def make_optimizer(strategy, base_lr, base_batch, per_replica_batch, warmup_steps):
    """Return keras.optimizers.SGD(momentum=0.9) that warms up to scaled_lr(...), created inside strategy.scope()."""
    target = scaled_lr(base_lr, base_batch, per_replica_batch, strategy)
    with strategy.scope():
        opt = keras.optimizers.SGD(learning_rate=WarmupSchedule(target, warmup_steps), momentum=0.9)
    return opt
