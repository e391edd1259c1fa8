"""Probes: train with the learner's `train`, kill the first run part-way, start again with the same backup_dir.

The model is Dense(1) from zeros, mean squared error, SGD with momentum 0.9, 32 examples in global batches of 8
(4 steps per epoch) on the real 2-replica MirroredStrategy, so the judge can compute the uninterrupted result
with NumPy. The "kill" is an exception raised by a callback at the start of a batch, as close to a killed
worker as one process gets: nothing after that point runs. TensorFlow is imported inside the functions so that
the judge can import this file cheaply.
"""

import os
import tempfile

import numpy as np

N, GLOBAL_BATCH, LR, MOMENTUM = 32, 8, 0.05, 0.9
TRUE_KERNEL = np.array([1.0, -2.0, 0.5, 3.0], dtype="float32")


def data():
    x = np.random.RandomState(0).randn(N, 4).astype("float32")
    y = (x @ TRUE_KERNEL + 0.25)[:, None].astype("float32")
    return x, y


class Killed(Exception):
    """Raised by the probe's callback to stop a run the way a killed worker stops."""


def _build_and_compile():
    import keras

    model = keras.Sequential([keras.Input(shape=(4,)), keras.layers.Dense(1, kernel_initializer="zeros")])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=LR, momentum=MOMENTUM), loss="mse")
    return model


def _callbacks(kill_epoch, kill_batch):
    import keras

    class Watch(keras.callbacks.Callback):
        """Record the epochs begun; raise Killed at (kill_epoch, kill_batch)."""

        def __init__(self):
            super().__init__()
            self.epochs = []

        def on_epoch_begin(self, epoch, logs=None):
            self.epochs.append(int(epoch))

        def on_train_batch_begin(self, batch, logs=None):
            if kill_epoch is not None and self.epochs and self.epochs[-1] == kill_epoch and batch == kill_batch:
                raise Killed(f"killed in epoch {kill_epoch}, batch {kill_batch}")

    return Watch()


def _files(folder):
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.relpath(os.path.join(root, f), folder) for root, _, names in os.walk(folder) for f in names)


def _run(submission, strategy, epochs, backup_dir, kill_epoch=None, kill_batch=None):
    import tensorflow as tf

    watch = _callbacks(kill_epoch, kill_batch)
    dataset = tf.data.Dataset.from_tensor_slices(data()).batch(GLOBAL_BATCH)
    seen = {"killed": False, "epochs": watch.epochs, "weights": None, "model": None}
    try:
        model = submission.train(strategy, _build_and_compile, dataset, epochs, backup_dir, [watch])
    except Killed:
        seen["killed"] = True
        return seen
    seen["model"] = type(model).__name__
    if hasattr(model, "get_weights"):
        seen["weights"] = [w.tolist() for w in model.get_weights()]
    return seen


def run(submission, epochs, kill_epoch=None, kill_batch=None):
    """One run; if it is killed, a second run with the same backup_dir, as a restarted worker would do."""
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy()
    backup_dir = os.path.join(tempfile.mkdtemp(), "backup")
    first = _run(submission, strategy, epochs, backup_dir, kill_epoch, kill_batch)
    first["files"] = _files(backup_dir)
    result = {"replicas": int(strategy.num_replicas_in_sync), "backup_dir": backup_dir, "first": first}
    if first["killed"]:
        result["second"] = _run(submission, strategy, epochs, backup_dir)
    return result
