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


def train_worker(workers: list[str], index: int, model_dir: str) -> keras.Model:
    """Join the cluster as worker `index`, train with a custom loop, save from the chief only."""
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": index}}
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = PER_REPLICA_BATCH * strategy.num_replicas_in_sync

    model = build_model()
    optimizer = keras.optimizers.SGD(LEARNING_RATE)

    dataset = make_dataset().batch(global_batch)
    dist_dataset = strategy.experimental_distribute_dataset(dataset)

    def step_fn(x, y):
        with tf.GradientTape() as tape:
            pred = model(x, training=True)
            per_example_loss = keras.losses.mean_squared_error(y, pred)
            loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train_step(x, y):
        per_replica_loss = strategy.run(step_fn, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_loss, axis=None)

    for epoch in range(EPOCHS):
        for x, y in dist_dataset:
            train_step(x, y)

    is_chief = strategy.cluster_resolver.task_id == 0
    if is_chief:
        model.save(os.path.join(model_dir, "model.keras"))
    else:
        tmp_dir = tempfile.mkdtemp(prefix=f"worker{index}_")
        model.save(os.path.join(tmp_dir, "model.keras"))
        shutil.rmtree(tmp_dir)
    return model
