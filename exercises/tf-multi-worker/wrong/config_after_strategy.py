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
    """Join the cluster as worker `index`, train with a custom loop, let the chief save; return the model."""
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})
    # Replicas of every worker together take one global batch per step.
    global_batch = PER_REPLICA_BATCH * strategy.num_replicas_in_sync
    # The default auto-shard policy gives each worker its own part of every global batch.
    dataset = strategy.experimental_distribute_dataset(make_dataset().batch(global_batch))
    with strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.SGD(learning_rate=LEARNING_RATE)

    def step(x, y):
        with tf.GradientTape() as tape:
            per_example = keras.losses.mean_squared_error(y, model(x, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train_step(batch):
        losses = strategy.run(step, args=batch)
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    for _ in range(EPOCHS):
        for batch in dataset:
            train_step(batch)

    # Every worker saves the same way (saving can involve collectives); only the chief's copy is kept.
    is_chief = strategy.cluster_resolver.task_id == 0
    folder = model_dir if is_chief else tempfile.mkdtemp(prefix=f"worker{index}-")
    model.save(os.path.join(folder, "model.keras"))
    if not is_chief:
        shutil.rmtree(folder)
    return model
