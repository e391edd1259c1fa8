"""Train one model on two workers with MultiWorkerMirroredStrategy (see the prompt).

Every worker runs this same file: the grader calls train_worker(workers, index, model_dir) in two processes,
with index 0 in the first and 1 in the second. Keep make_dataset, build_model and the constants as they are.
"""

import json
import os
import shutil

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
    _set_tf_config(workers, index)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = PER_REPLICA_BATCH * strategy.num_replicas_in_sync

    with strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.SGD(LEARNING_RATE)
    loss_fn = keras.losses.MeanSquaredError(reduction=None)

    dist_dataset = strategy.experimental_distribute_dataset(make_dataset().batch(global_batch))

    def step_fn(batch):
        features, labels = batch
        with tf.GradientTape() as tape:
            per_example = loss_fn(labels, model(features, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(list(zip(grads, model.trainable_variables)))
        return loss

    @tf.function
    def train_step(batch):
        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(step_fn, args=(batch,)), axis=None)

    for _ in range(EPOCHS):
        for batch in dist_dataset:
            train_step(batch)

    task_type = strategy.cluster_resolver.task_type
    task_id = strategy.cluster_resolver.task_id
    path = _write_path(model_dir, task_type, task_id)
    model.save(path)
    if not _is_chief(task_type, task_id):
        shutil.rmtree(os.path.dirname(path))
    return model


def _set_tf_config(workers, index):
    cluster = {"worker": list(workers)}
    task = {"type": "worker", "index": index}
    os.environ["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": task})


def _is_chief(task_type, task_id):
    # no "chief" job in the cluster, so worker 0 plays the chief
    return task_type is None or task_type == "chief" or (task_type == "worker" and task_id == 0)


def _write_path(model_dir, task_type, task_id):
    if _is_chief(task_type, task_id):
        return os.path.join(model_dir, "model.keras")
    temp_dir = os.path.join(model_dir, f"workertemp_{task_id}")
    os.makedirs(temp_dir, exist_ok=True)
    return os.path.join(temp_dir, "model.keras")
