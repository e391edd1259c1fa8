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
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": index}}
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task_id = strategy.cluster_resolver.task_id
    is_chief = task_id == 0
    num_replicas = strategy.num_replicas_in_sync
    global_batch = PER_REPLICA_BATCH * num_replicas
    if is_chief:
        print(f"cluster of {num_replicas} replicas, global batch {global_batch}")

    with strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.SGD(LEARNING_RATE)
    mse = keras.losses.MeanSquaredError(reduction="none")

    dist_dataset = strategy.experimental_distribute_dataset(make_dataset().batch(global_batch))

    @tf.function
    def train_step(x, y):
        def step_fn(x, y):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(mse(y, model(x, training=True)), global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss

        per_replica = strategy.run(step_fn, args=(x, y))
        # every worker joins this reduction (inside the step); only the chief prints it below
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    for epoch in range(EPOCHS):
        total, steps = 0.0, 0
        for x, y in dist_dataset:
            total += float(train_step(x, y))
            steps += 1
        if is_chief:
            print(f"epoch {epoch + 1}/{EPOCHS}: mean loss {total / steps:.5f} over {steps} steps")

    if is_chief:
        model.save(os.path.join(model_dir, "model.keras"))
    else:
        scratch = tempfile.mkdtemp()
        try:
            model.save(os.path.join(scratch, "model.keras"))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return model
