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
        {
            "cluster": {"worker": list(workers)},
            "task": {"type": "worker", "index": index},
        }
    )
    strategy = tf.distribute.MultiWorkerMirroredStrategy()

    global_batch = PER_REPLICA_BATCH * strategy.num_replicas_in_sync

    with strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.SGD(LEARNING_RATE)

    def dataset_fn(context):
        dataset = make_dataset()
        dataset = dataset.shard(context.num_input_pipelines, context.input_pipeline_id)
        return dataset.batch(global_batch)

    dist_dataset = strategy.distribute_datasets_from_function(dataset_fn)

    def step_fn(inputs):
        x, y = inputs
        with tf.GradientTape() as tape:
            predictions = model(x, training=True)
            per_example_loss = keras.losses.mean_squared_error(y, predictions)
            loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    @tf.function
    def train_step(inputs):
        per_replica_losses = strategy.run(step_fn, args=(inputs,))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

    for epoch in range(EPOCHS):
        for batch in dist_dataset:
            train_step(batch)

    if strategy.cluster_resolver.task_id == 0:
        model.save(os.path.join(model_dir, "model.keras"))
    return model
