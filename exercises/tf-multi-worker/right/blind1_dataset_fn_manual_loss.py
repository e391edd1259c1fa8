"""Train one model on two workers with MultiWorkerMirroredStrategy (see the prompt).

Every worker runs this same file: the grader calls train_worker(workers, index, model_dir) in two processes,
with index 0 in the first and 1 in the second. Keep make_dataset, build_model and the constants as they are.
"""

import json
import os

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
    os.environ["TF_CONFIG"] = json.dumps(
        {"cluster": {"worker": [str(w) for w in workers]}, "task": {"type": "worker", "index": int(index)}}
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = PER_REPLICA_BATCH * strategy.num_replicas_in_sync

    with strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.SGD(learning_rate=LEARNING_RATE)

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        per_replica_batch = context.get_per_replica_batch_size(global_batch)
        ds = make_dataset()
        ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id)
        return ds.batch(per_replica_batch)

    dist_dataset = strategy.distribute_datasets_from_function(dataset_fn)

    def replica_step(x, y):
        with tf.GradientTape() as tape:
            pred = model(x, training=True)
            squared = tf.reduce_mean(tf.square(y - pred), axis=-1)  # one value per example
            loss = tf.reduce_sum(squared) / tf.cast(global_batch, squared.dtype)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def distributed_step(x, y):
        losses = strategy.run(replica_step, args=(x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    for _ in range(EPOCHS):
        for x, y in dist_dataset:
            distributed_step(x, y)

    if index == 0:  # no "chief" entry in the cluster: worker 0 is the chief
        model.save(os.path.join(model_dir, "model.keras"))
    return model
