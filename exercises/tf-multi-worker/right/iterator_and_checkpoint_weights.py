import json
import os
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


def _tf_config(workers, index):
    return json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})


def train_worker(workers, index, model_dir):
    """Steps counted by hand with next(iterator); a checkpoint on every worker, then the chief's model file."""
    os.environ["TF_CONFIG"] = _tf_config(workers, index)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    replicas = strategy.num_replicas_in_sync
    global_batch = PER_REPLICA_BATCH * replicas
    steps_per_epoch = 64 // global_batch
    dataset = strategy.experimental_distribute_dataset(make_dataset().batch(global_batch))

    with strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.SGD(learning_rate=LEARNING_RATE)
        checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)

    @tf.function
    def step(batch):
        def on_replica(x, y):
            with tf.GradientTape() as tape:
                per_example = keras.losses.mean_squared_error(y, model(x, training=True))
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(list(zip(grads, model.trainable_variables)))
            return loss

        return strategy.reduce(tf.distribute.ReduceOp.SUM, strategy.run(on_replica, args=batch), axis=None)

    for _ in range(EPOCHS):
        iterator = iter(dataset)
        for _ in range(steps_per_epoch):
            step(next(iterator))

    # Saved in the scope, a checkpoint's counter is a distributed variable: every worker must save together.
    chief = strategy.cluster_resolver.task_id == 0
    folder = os.path.join(model_dir, "checkpoints") if chief else tempfile.mkdtemp()
    with strategy.scope():
        checkpoint.save(os.path.join(folder, "ckpt"))
    if chief:
        model.save(os.path.join(model_dir, "model.keras"))
    return model
