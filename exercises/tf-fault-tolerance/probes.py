"""Probes: train with the learner's `train`, kill the first run part-way, start again with the same backup_dir.

The model is Dense(1) from zeros, mean squared error, SGD with momentum 0.9, 32 examples in global batches of 8
(4 steps per epoch) on the real 2-replica MirroredStrategy, so the judge can compute the uninterrupted result
with NumPy. The "kill" is an exception raised by a callback at the start of a batch, as close to a killed
worker as one process gets: nothing after that point runs. The same callback observes each run for the tests:
how many times fit was called, the epochs begun, the weights and SGD's momentum when the first epoch begins (after
any restore) and at every epoch's end, the files in backup_dir (also when the kill came), and whether the model's
variables are mirrored by the given strategy. The second run sees another os.getpid(), as a restarted process would.
TensorFlow is imported inside the functions so that the judge can import this file cheaply.
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


def _numbers(values):
    return [np.asarray(v, dtype="float64").tolist() for v in values]


def _momentum(model):
    """SGD's momentum slots (one per weight, in the weights' order), or None when the optimizer has none yet."""
    slots = getattr(getattr(model, "optimizer", None), "momentums", None)
    if not slots:
        return None
    try:
        return _numbers(np.asarray(s) for s in slots)
    except Exception:
        return None


def _variable(strategy, variable):
    """What a weight is (a MirroredVariable or a plain one) and whether the given strategy created it."""
    value = getattr(variable, "value", variable)  # Keras 3: the tf.Variable (a MirroredVariable) is `.value`
    try:
        in_scope = bool(strategy.extended.variable_created_in_scope(value))
    except Exception:
        in_scope = None
    return {"type": type(value).__name__, "in_scope": in_scope}


def _callbacks(strategy, backup_dir, kill_epoch, kill_batch):
    import keras

    class Watch(keras.callbacks.Callback):
        """Observe the run (fit calls, epochs, weights, momentum, backup_dir); raise Killed at (kill_epoch, kill_batch).

        It only records: the tests compare. Restoring happens before the first epoch begins (BackupAndRestore in
        on_train_begin, a checkpoint of one's own before fit), so the state at the first on_epoch_begin is the
        state the run resumed from, wherever this callback stands in the list.
        """

        def __init__(self):
            super().__init__()
            self.epochs, self.fits, self.raised = [], 0, False
            self.start = None  # at the first epoch's beginning: weights, momentum, files in backup_dir
            self.ends = {}  # epoch -> weights and momentum at its end
            self.variables = None
            self.files_at_kill = None  # what backup_dir held when the kill came

        def on_train_begin(self, logs=None):
            self.fits += 1
            if self.variables is None:
                try:
                    self.variables = [_variable(strategy, w) for w in self.model.weights]
                except Exception:
                    self.variables = []

        def on_epoch_begin(self, epoch, logs=None):
            self.epochs.append(int(epoch))
            if self.start is None:
                self.start = {"weights": _numbers(self.model.get_weights()), "momentum": _momentum(self.model),
                              "files": _files(backup_dir)}

        def on_epoch_end(self, epoch, logs=None):
            self.ends[int(epoch)] = {"weights": _numbers(self.model.get_weights()), "momentum": _momentum(self.model)}

        def on_train_batch_begin(self, batch, logs=None):
            if kill_epoch is not None and self.epochs and self.epochs[-1] == kill_epoch and batch == kill_batch:
                self.raised = True
                self.files_at_kill = _files(backup_dir)
                raise Killed(f"killed in epoch {kill_epoch}, batch {kill_batch}")

    return Watch()


def _files(folder):
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.relpath(os.path.join(root, f), folder) for root, _, names in os.walk(folder) for f in names)


def _run(submission, strategy, epochs, backup_dir, kill_epoch=None, kill_batch=None):
    import tensorflow as tf

    watch = _callbacks(strategy, backup_dir, kill_epoch, kill_batch)
    dataset = tf.data.Dataset.from_tensor_slices(data()).batch(GLOBAL_BATCH)
    seen = {"killed": False, "weights": None, "model": None}
    try:
        model = submission.train(strategy, _build_and_compile, dataset, epochs, backup_dir, [watch])
    except Killed:
        seen["killed"] = True
    else:
        seen["model"] = type(model).__name__
        if hasattr(model, "get_weights"):
            seen["weights"] = _numbers(model.get_weights())
        try:
            seen["returned_variables"] = [_variable(strategy, w) for w in model.weights]
        except Exception:
            seen["returned_variables"] = None
    seen.update(epochs=watch.epochs, fits=watch.fits, raised=watch.raised, start=watch.start,
                files_at_kill=watch.files_at_kill,
                ends={str(k): v for k, v in sorted(watch.ends.items())}, variables=watch.variables)
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
        # A restarted worker is a new process: the second run sees another process id (anything the first run named
        # after its pid is then somewhere the second one does not look), as after a real restart.
        real_getpid = os.getpid
        first_pid = real_getpid()
        os.getpid = lambda: first_pid + 1
        try:
            result["second"] = _run(submission, strategy, epochs, backup_dir)
        finally:
            os.getpid = real_getpid
    return result
