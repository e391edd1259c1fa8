from fractions import Fraction

import keras
from keras import ops


def scaled_lr(base_lr, base_batch, per_replica_batch, strategy):
    if not base_lr > 0 or min(base_batch, per_replica_batch) < 1:
        raise ValueError("base_lr must be positive and both batch sizes at least 1")
    factor = Fraction(per_replica_batch * strategy.num_replicas_in_sync, base_batch)
    return float(base_lr * factor)


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    def __init__(self, target_lr, warmup_steps):
        super().__init__()
        if warmup_steps < 0:
            raise ValueError("warmup_steps must not be negative")
        self.target_lr = float(target_lr)
        self.warmup_steps = int(warmup_steps)

    def __call__(self, step):
        step = ops.cast(step, "float32")
        ramp = self.target_lr * (step + 1.0) / max(self.warmup_steps, 1)
        # ops.where picks per element, in graph mode too; with no warm-up the ramp is never chosen.
        return ops.where(step < self.warmup_steps, ramp, ops.cast(self.target_lr, "float32"))

    def get_config(self):
        return dict(target_lr=self.target_lr, warmup_steps=self.warmup_steps)


def make_optimizer(strategy, base_lr, base_batch, per_replica_batch, warmup_steps):
    schedule = WarmupSchedule(scaled_lr(base_lr, base_batch, per_replica_batch, strategy), warmup_steps)
    with strategy.scope():
        optimizer = keras.optimizers.SGD(learning_rate=schedule, momentum=0.9)
    return optimizer
