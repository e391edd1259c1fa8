"""Train one model on two workers with MultiWorkerMirroredStrategy (see the prompt)."""

import json
import os
import shutil
import tempfile

import keras
import numpy as np
import tensorflow as tf

PER_REPLICA_BATCH = 8
LEARNING_RATE = 0.05
EPOCHS = 3


def make_dataset() -> tf.data.Dataset:
    """The training data: 64 unbatched (x, y) examples, always in the same order."""
    x = np.random.RandomState(0).randn(64, 4).astype("float32")
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], dtype="float32") + 0.25)[:, None]
    return tf.data.Dataset.from_tensor_slices((x, y))


def build_model() -> keras.Model:
    """A linear model that starts from zeros."""
    return keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(1, kernel_initializer="zeros")])


class _WorkerTrainer:
    def __init__(self, strategy: tf.distribute.Strategy):
        self.strategy = strategy
        self.global_batch = PER_REPLICA_BATCH * strategy.num_replicas_in_sync
        with strategy.scope():
            self.model = build_model()
            self.optimizer = keras.optimizers.SGD(LEARNING_RATE)
        self._step = tf.function(self._distributed_step)

    def _replica_step(self, x, y):
        with tf.GradientTape() as tape:
            pred = self.model(x, training=True)
            # sum of this replica's squared errors over the GLOBAL batch: its share of the global mean
            loss = tf.reduce_sum(tf.square(pred - y)) / float(self.global_batch)
        grads = tape.gradient(loss, self.model.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables))

    def _distributed_step(self, x, y):
        self.strategy.run(self._replica_step, args=(x, y))

    def fit(self, epochs: int) -> None:
        dist_dataset = self.strategy.experimental_distribute_dataset(make_dataset().batch(self.global_batch))
        for _ in range(epochs):
            for x, y in dist_dataset:
                self._step(x, y)


def train_worker(workers: list[str], index: int, model_dir: str) -> keras.Model:
    if not 0 <= index < len(workers):
        raise ValueError(f"index {index} is not a worker of {workers}")
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": [str(w) for w in workers]}, "task": {"type": "worker", "index": index}}
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    trainer = _WorkerTrainer(strategy)
    trainer.fit(EPOCHS)

    if strategy.cluster_resolver.task_id == 0:
        trainer.model.save(os.path.join(model_dir, "model.keras"))
    return trainer.model
