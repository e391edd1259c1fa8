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


def _dataset_fn(context: tf.distribute.InputContext, global_batch: int) -> tf.data.Dataset:
    """This worker's own part: shard by input pipeline, then batch per replica (no shuffle)."""
    dataset = make_dataset().shard(context.num_input_pipelines, context.input_pipeline_id)
    return dataset.batch(context.get_per_replica_batch_size(global_batch))


def train_worker(workers: list[str], index: int, model_dir: str) -> keras.Model:
    tf_config = {"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": int(index)}}
    os.environ["TF_CONFIG"] = json.dumps(tf_config)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    global_batch = PER_REPLICA_BATCH * strategy.num_replicas_in_sync
    with strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.SGD(learning_rate=LEARNING_RATE)

    dist_dataset = strategy.distribute_datasets_from_function(lambda ctx: _dataset_fn(ctx, global_batch))

    @tf.function
    def train_step(x, y):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                per_example_loss = keras.losses.mean_squared_error(y, model(x, training=True))
                loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))

        strategy.run(replica_step, args=(x, y))

    for _ in range(EPOCHS):
        for x, y in dist_dataset:
            train_step(x, y)

    resolver = strategy.cluster_resolver
    is_chief = resolver.task_type in (None, "worker") and resolver.task_id == 0
    if is_chief:
        os.makedirs(model_dir, exist_ok=True)
        model.save(os.path.join(model_dir, "model.keras"))
    return model
