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


def train_worker(workers, index, model_dir):
    """distribute_datasets_from_function with explicit sharding; only the chief calls save."""
    config = {"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": int(index)}}
    os.environ["TF_CONFIG"] = json.dumps(config)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = PER_REPLICA_BATCH * strategy.num_replicas_in_sync

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        # Nothing shards this dataset for us: keep every num_input_pipelines-th example, from our own offset.
        shard = make_dataset().shard(context.num_input_pipelines, context.input_pipeline_id)
        return shard.batch(context.get_per_replica_batch_size(global_batch))

    batches = strategy.distribute_datasets_from_function(dataset_fn)
    with strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.SGD(LEARNING_RATE)

    @tf.function
    def train_step(x, y):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                squared = tf.reduce_mean(tf.square(model(x, training=True) - y), axis=-1)
                loss = tf.reduce_sum(squared) / global_batch
            variables = model.trainable_variables
            optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
            return loss

        return strategy.reduce("SUM", strategy.run(replica_step, args=(x, y)), axis=None)

    for epoch in range(EPOCHS):
        for x, y in batches:
            train_step(x, y)

    if strategy.cluster_resolver.task_id == 0:
        model.save(os.path.join(model_dir, "model.keras"))
    return model
