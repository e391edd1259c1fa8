"""Train one model on two workers with MultiWorkerMirroredStrategy (see the prompt).

Every worker runs this same file: the grader calls train_worker(workers, index, model_dir) in two processes,
with index 0 in the first and 1 in the second. Keep make_dataset, build_model and the constants as they are.
"""

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
    """Join the cluster of `workers` as worker `index`, train the shared model with a custom loop
    (SGD(LEARNING_RATE), mean squared error, EPOCHS passes, PER_REPLICA_BATCH examples per replica per step),
    save it as model_dir/model.keras from the chief only, and return the trained model."""
    strategy = _make_strategy(workers, index)
    n_replicas = strategy.num_replicas_in_sync
    global_batch = n_replicas * PER_REPLICA_BATCH

    with strategy.scope():
        optimizer = keras.optimizers.SGD(LEARNING_RATE)
        model = build_model()

    dataset = make_dataset()
    dataset = dataset.batch(global_batch)
    dist_dataset = strategy.experimental_distribute_dataset(dataset)

    def per_replica_loss(y_true, y_pred):
        per_example = tf.reduce_sum(tf.math.squared_difference(y_true, y_pred), axis=1)  # 1 output: sum == mean
        return tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)

    def step_fn(x, y):
        with tf.GradientTape() as tape:
            loss = per_replica_loss(y, model(x, training=True))
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))

    train_step = tf.function(lambda x, y: strategy.run(step_fn, args=(x, y)))

    epoch = 0
    while epoch < EPOCHS:
        for features, labels in dist_dataset:
            train_step(features, labels)
        epoch += 1

    is_chief = strategy.cluster_resolver.task_id == 0
    target_dir = model_dir if is_chief else tempfile.mkdtemp(prefix="worker_tmp_")
    try:
        model.save(os.path.join(target_dir, "model.keras"))
    finally:
        if not is_chief:
            shutil.rmtree(target_dir, ignore_errors=True)
    return model


def _make_strategy(workers, index):
    os.environ["TF_CONFIG"] = json.dumps(
        {
            "cluster": {"worker": list(workers)},
            "task": {"type": "worker", "index": index},
        }
    )
    return tf.distribute.MultiWorkerMirroredStrategy()
