"""Probes for tf-capstone: run the learner's train(strategy) on the real 2-replica MirroredStrategy and report, as
data, what it returned and what it did.

Recorded while train runs (forgeable by a learner who patches this file, like every probe's observations; the
final weights, which the judge recomputes, are not):
- every call of the module's build_model and every Keras optimizer made: whether a strategy's scope was open then,
  and each optimizer's learning rate and step count after training;
- every distributed batch taken in eager Python (a `for batch in dist_dataset:` loop): for each replica, the ids of
  its examples (found by their feature rows: training examples 0-511, validation examples 512-1023); batches
  taken inside a tf.function are not seen;
- every strategy.run call (traced or eager) with tensors among its arguments: whether any of them was a per-replica
  value, or all were plain tensors, which every replica then gets whole;
- every dataset handed to experimental_distribute_dataset (the shapes of its element's parts: (16,) features are
  single examples, an unbatched dataset) and every distribute_datasets_from_function call;
- every tf.nn.compute_average_loss call (the global_batch_size it was given, the rank of the losses) and every
  ReplicaContext.all_reduce call the learner's code made outside Keras (an all-reduce of the gradients by hand).
After train returns, the probe evaluates the returned model on the validation and the training set itself, and
notes the Python types of the returned numbers. The hidden tests import
make_data, build_model and the constants from here. TensorFlow is imported inside the functions, so that the
judge imports this file cheaply.
"""

import contextlib
import itertools

import numpy as np

FEATURES, CLASSES, HIDDEN = 16, 4, 32
BATCH, LR, EPOCHS = 32, 0.02, 6
N_TRAIN, N_VAL = 512, 512
TARGET = 0.92
MAX_BATCH_NOTES = 400


def make_data():
    """The starter's data: 512 training and 512 validation examples, as NumPy arrays."""
    rs = np.random.RandomState(11)
    centers = rs.randn(CLASSES, FEATURES).astype("float32")
    y = rs.randint(0, CLASSES, 1024).astype("int32")
    x = (centers[y] + rs.randn(1024, FEATURES)).astype("float32")
    return (x[:512], y[:512]), (x[512:], y[512:])


def build_model():
    """The starter's model (Keras is imported here, not when the judge imports this file)."""
    import keras

    return keras.Sequential([
        keras.Input(shape=(FEATURES,)),
        keras.layers.Dense(HIDDEN, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=1)),
        keras.layers.Dense(CLASSES, kernel_initializer=keras.initializers.GlorotUniform(seed=2)),
    ])


def initial_weights(submission):
    """The seeded starting weights of build_model(), for the judge's one-device reference (a probe: needs Keras)."""
    return [w.tolist() for w in build_model().get_weights()]


def _float(value):
    try:
        return float(np.asarray(value).reshape(()))
    except Exception:
        return None


def _install(submission, seen):
    """Patch what train uses so that it reports (see the module docstring); return a function that undoes it."""
    import keras
    import tensorflow as tf
    from tensorflow.python.distribute import input_lib

    undo = []

    def patch(owner, name, new):
        old = getattr(owner, name)
        setattr(owner, name, new(old))
        undo.append(lambda: setattr(owner, name, old))

    if callable(getattr(submission, "build_model", None)):

        def build(old):
            def wrapped(*args, **kwargs):
                seen["builds"].append(bool(tf.distribute.has_strategy()))
                return old(*args, **kwargs)

            return wrapped

        patch(submission, "build_model", build)

    def optimizer_init(old):
        def init(self, *args, **kwargs):
            old(self, *args, **kwargs)
            seen["optimizers"].append((self, bool(tf.distribute.has_strategy())))

        return init

    patch(keras.optimizers.Optimizer, "__init__", optimizer_init)

    (x, _), (x_val, _) = make_data()
    index_of = {tuple(np.round(row, 5).tolist()): i for i, row in enumerate(np.concatenate([x, x_val]))}
    passes = itertools.count()

    def get_next(old):
        def wrapped(self, *args, **kwargs):
            element = old(self, *args, **kwargs)
            if tf.executing_eagerly() and len(seen["batches"]) < MAX_BATCH_NOTES:
                if "_probe_pass" not in vars(self):  # a new iterator: a new pass over a dataset
                    self._probe_pass = next(passes)
                try:
                    first = tf.nest.flatten(element)[0]
                    parts = self._strategy.experimental_local_results(first)
                    ids = [[index_of.get(tuple(np.round(r, 5).tolist()), -1) for r in p.numpy().reshape(len(p), -1)]
                           for p in parts]
                    seen["batches"].append({"pass": self._probe_pass, "replicas": ids,
                                            "from_function": bool(vars(self).get("_probe_from_function"))})
                except Exception as exc:
                    seen["batches"].append({"pass": self._probe_pass, "unreadable": f"{type(exc).__name__}"})
            return element

        return wrapped

    patch(input_lib.DistributedIteratorBase, "get_next", get_next)

    def from_function_iter(old):
        def wrapped(self):
            iterator = old(self)
            with contextlib.suppress(Exception):
                iterator._probe_from_function = True  # its batches come from a dataset_fn's per-replica batches
            return iterator

        return wrapped

    patch(input_lib.DistributedDatasetsFromFunction, "__iter__", from_function_iter)

    def run(old):
        def wrapped(self, fn, args=(), kwargs=None, options=None):
            flat = tf.nest.flatten((args, kwargs or {}), expand_composites=False)
            tensors = [a for a in flat if isinstance(a, (tf.Tensor, np.ndarray, tf.distribute.DistributedValues))]
            if tensors:
                plain = not any(isinstance(a, tf.distribute.DistributedValues) for a in tensors)
                seen["runs"]["plain" if plain else "distributed"] += 1
                if plain and seen["plain_shape"] is None:
                    shape = getattr(tensors[0], "shape", None)
                    seen["plain_shape"] = None if shape is None else [d if d is None else int(d) for d in shape]
            return old(self, fn, args=args, kwargs=kwargs, options=options)

        return wrapped

    patch(tf.distribute.MirroredStrategy, "run", run)

    def shapes_of(dataset):
        try:
            return [None if s.shape.rank is None else [d if d is None else int(d) for d in s.shape]
                    for s in tf.nest.flatten(dataset.element_spec)]
        except Exception:
            return None

    def distribute_dataset(old):
        def wrapped(self, dataset, *args, **kwargs):
            seen["distributed"].append({"api": "experimental_distribute_dataset", "shapes": shapes_of(dataset)})
            return old(self, dataset, *args, **kwargs)

        return wrapped

    patch(tf.distribute.MirroredStrategy, "experimental_distribute_dataset", distribute_dataset)

    def from_function(old):
        def wrapped(self, *args, **kwargs):
            seen["distributed"].append({"api": "distribute_datasets_from_function", "shapes": None})
            return old(self, *args, **kwargs)

        return wrapped

    patch(tf.distribute.MirroredStrategy, "distribute_datasets_from_function", from_function)

    def average_loss(old):
        def wrapped(per_example_loss, *args, **kwargs):
            size = kwargs.get("global_batch_size", args[1] if len(args) > 1 else None)
            rank = getattr(getattr(per_example_loss, "shape", None), "rank", None)
            seen["average_loss"].append({"global_batch_size": size if isinstance(size, int) else None,
                                         "given": size is not None, "rank": rank})
            return old(per_example_loss, *args, **kwargs)

        return wrapped

    patch(tf.nn, "compute_average_loss", average_loss)

    keras_depth = [0]  # all-reduces made inside Keras (its optimizer, its metrics) are not the learner's

    def inside_keras(old):
        def wrapped(*args, **kwargs):
            keras_depth[0] += 1
            try:
                return old(*args, **kwargs)
            finally:
                keras_depth[0] -= 1

        return wrapped

    patch(keras.optimizers.Optimizer, "apply_gradients", inside_keras)
    patch(keras.optimizers.Optimizer, "apply", inside_keras)
    patch(keras.metrics.Metric, "update_state", inside_keras)

    from tensorflow.python.distribute import distribute_lib

    def all_reduce(old):
        def wrapped(self, reduce_op, *args, **kwargs):
            if not keras_depth[0]:
                seen["all_reduces"].append(str(reduce_op))
            return old(self, reduce_op, *args, **kwargs)

        return wrapped

    patch(distribute_lib.ReplicaContextBase, "all_reduce", all_reduce)
    return lambda: [u() for u in reversed(undo)]


def run(submission):
    """train(strategy) on the 2-replica MirroredStrategy; what it returned and what it did."""
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy()
    seen = {"builds": [], "optimizers": [], "batches": [], "runs": {"plain": 0, "distributed": 0},
            "plain_shape": None, "distributed": [], "average_loss": [], "all_reduces": []}
    restore = _install(submission, seen)
    report = {"replicas": int(strategy.num_replicas_in_sync), "error": None}
    try:
        result = submission.train(strategy)
    except Exception as exc:
        report["error"] = {"type": type(exc).__name__, "message": str(exc)[:4000]}
        result = None
    finally:
        restore()
    report.update({k: seen[k] for k in ("builds", "batches", "runs", "plain_shape", "distributed", "average_loss",
                                        "all_reduces")})
    report["optimizers"] = [
        {"in_scope": in_scope, "learning_rate": _float(opt.learning_rate), "iterations": int(opt.iterations.numpy())}
        for opt, in_scope in seen["optimizers"]
    ]
    if result is None:
        return report
    report["returned"] = type(result).__name__
    if not isinstance(result, dict):
        return report
    report["keys"] = sorted(map(str, result))
    report["train_loss"] = _float(result.get("train_loss"))
    report["val_accuracy"] = _float(result.get("val_accuracy"))
    # The prompt asks for Python floats (a float subclass such as numpy.float64 is one).
    report["types"] = {k: type(result.get(k)).__name__ for k in ("train_loss", "val_accuracy")}
    report["are_floats"] = {k: isinstance(result.get(k), float) for k in ("train_loss", "val_accuracy")}
    model = result.get("model")
    report["model"] = type(model).__name__
    if hasattr(model, "get_weights"):
        report["weights"] = [w.tolist() for w in model.get_weights()]
        report["variable_types"] = sorted({type(getattr(v, "value", v)).__name__ for v in model.weights})
        (x, y), (x_val, y_val) = make_data()
        try:
            logits = np.asarray(model(x_val, training=False))
            correct = np.argmax(logits, axis=1) == y_val
            report["probe_val_accuracy"] = float(np.mean(correct))
            report["probe_val_correct"] = correct.astype(int).tolist()  # per example: accuracy of any subset
            logits = np.asarray(model(x, training=False))
            report["probe_train_accuracy"] = float(np.mean(np.argmax(logits, axis=1) == y))
        except Exception as exc:
            report["probe_val_accuracy"] = None
            report["probe_error"] = {"type": type(exc).__name__, "message": str(exc)[:2000]}
    return report
