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
    """A whole epoch inside one tf.function, a Keras loss object without reduction, and the chief-only save."""
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    is_chief = strategy.cluster_resolver.task_id == 0
    global_batch = PER_REPLICA_BATCH * strategy.num_replicas_in_sync
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dist_data = strategy.experimental_distribute_dataset(make_dataset().batch(global_batch).with_options(options))

    with strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.SGD(learning_rate=LEARNING_RATE)
        loss_fn = keras.losses.MeanSquaredError(reduction=None)

    def replica_step(inputs):
        x, y = inputs
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_fn(y, model(x, training=True)), global_batch_size=global_batch)
        optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
        return loss

    @tf.function
    def train_epoch(data):
        total = tf.constant(0.0)
        for batch in data:
            total += strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(replica_step, args=(batch,)), axis=None)
        return total

    for _ in range(EPOCHS):
        train_epoch(dist_data)

    # The tutorial's layout: a non-chief writes into a folder of its own inside model_dir, then removes it.
    target = model_dir if is_chief else os.path.join(model_dir, f"workertemp_{strategy.cluster_resolver.task_id}")
    os.makedirs(target, exist_ok=True)
    model.save(os.path.join(target, "model.keras"))
    if not is_chief:
        for name in os.listdir(target):
            os.remove(os.path.join(target, name))
        os.rmdir(target)
    return model
