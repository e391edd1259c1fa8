import keras


def scaled_lr(base_lr, base_batch, per_replica_batch, strategy):
    if base_lr <= 0 or base_batch < 1 or per_replica_batch < 1:
        raise ValueError("need base_lr > 0 and batch sizes of at least 1")
    return base_lr * (strategy.num_replicas_in_sync * per_replica_batch) / base_batch


class WarmupSchedule(keras.optimizers.schedules.CosineDecay):
    """Keras's CosineDecay with alpha=1.0 never decays; its warm-up goes linearly from initial_learning_rate to
    warmup_target over warmup_steps steps, starting at step 0. Starting at target/k and taking k - 1 steps gives
    target * (step + 1) / k."""

    def __init__(self, target_lr, warmup_steps):
        if warmup_steps < 0:
            raise ValueError(f"warmup_steps must not be negative, got {warmup_steps}")
        self.target_lr, self.ramp_steps = target_lr, warmup_steps
        super().__init__(
            initial_learning_rate=target_lr / max(warmup_steps, 1),
            decay_steps=1,
            alpha=1.0,
            warmup_target=target_lr,
            warmup_steps=max(warmup_steps - 1, 0),
        )

    def get_config(self):
        return {"target_lr": self.target_lr, "warmup_steps": self.ramp_steps}


def make_optimizer(strategy, base_lr, base_batch, per_replica_batch, warmup_steps):
    with strategy.scope():
        schedule = WarmupSchedule(scaled_lr(base_lr, base_batch, per_replica_batch, strategy), warmup_steps)
        return keras.optimizers.SGD(learning_rate=schedule, momentum=0.9)
