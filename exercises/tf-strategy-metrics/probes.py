"""Probes: evaluate a seeded Dense(3) model with the learner's functions and report the metric values.

Example i of an epoch is either predicted right or wrong by the fixed model, by construction (`data`), so the
judge knows the accuracy of every replica's share and of the whole epoch, and computes the cross-entropies with
NumPy. TensorFlow is imported inside the functions so that the judge can import this file cheaply.
"""

import numpy as np

FEATURES = 4
CLASSES = 3
GLOBAL_BATCH = 8


def initial_weights():
    rs = np.random.RandomState(42)
    return rs.randn(FEATURES, CLASSES).astype("float32") * 0.5, np.linspace(-0.1, 0.1, CLASSES).astype("float32")


def data(n: int, seed: int, right):
    """n examples; example i is labelled with the model's prediction when right(i), else with another class."""
    x = np.random.RandomState(seed).randn(n, FEATURES).astype("float32")
    kernel, bias = initial_weights()
    predicted = np.argmax(x @ kernel + bias, axis=1)
    y = np.array([p if right(i) else (p + 1) % CLASSES for i, p in enumerate(predicted)], dtype="int64")
    return x, y


def epoch_a(i: int) -> bool:
    """Epoch A (11 examples, batches of 8 and 3): replica 0 gets ids 0-3 and 8-9, all right; replica 1 none."""
    return i in (0, 1, 2, 3, 8, 9)


def epoch_b(i: int) -> bool:
    """Epoch B (10 examples): every third example is right."""
    return i % 3 == 0


EPOCHS = {"A": (11, 0, epoch_a), "B": (10, 1, epoch_b)}


def _float(value):
    try:
        return float(np.asarray(value).reshape(()))
    except Exception:
        return None


def _describe(value):
    """What a metric was given: its shape (a list, None where unknown) and dtype, or the Python type's name."""
    shape = getattr(value, "shape", None)
    try:
        shape = None if shape is None else [None if d is None else int(d) for d in shape]
    except Exception:
        shape = None
    dtype = getattr(value, "dtype", None)
    name = getattr(dtype, "name", None) or (str(dtype) if dtype is not None else type(value).__name__)
    return {"shape": shape, "dtype": str(name)}


def _spy(metric, calls):
    """Record what each update_state call of `metric` is given (and whether it raised), then run it."""
    original = metric.update_state

    def update_state(*args, **kwargs):
        call = {
            "args": [_describe(a) for a in args],
            "kwargs": {k: _describe(v) for k, v in kwargs.items()},
            "raised": False,
        }
        calls.append(call)
        try:
            return original(*args, **kwargs)
        except Exception:
            call["raised"] = True
            raise

    metric.update_state = update_state


def _report(result):
    if not isinstance(result, dict):
        return {"type": type(result).__name__, "accuracy": None, "loss": None}
    return {
        "type": "dict",
        "keys": sorted(map(str, result)),
        "accuracy": _float(result.get("accuracy")),
        "loss": _float(result.get("loss")),
        "types": {k: type(result.get(k)).__name__ for k in ("accuracy", "loss")},
        "floats": {k: isinstance(result.get(k), float) for k in ("accuracy", "loss")},
    }


def _setup(strategy):
    import keras

    with strategy.scope():
        model = keras.Sequential([keras.Input(shape=(FEATURES,)), keras.layers.Dense(CLASSES)])
        model.set_weights(list(initial_weights()))
        metrics = {
            "accuracy": keras.metrics.SparseCategoricalAccuracy(name="accuracy"),
            "loss": keras.metrics.Mean(name="loss"),
        }
    return model, metrics


def one_device(submission, epoch):
    """update_metrics on one device (no strategy), once per batch of GLOBAL_BATCH (8, then the rest), eagerly.

    Returns the metrics' values after the calls, what each metric's update_state was given, and the exception
    the calls raised (type and text), if any.
    """
    import tensorflow as tf

    n, seed, right = EPOCHS[epoch]
    x, y = data(n, seed, right)
    model, metrics = _setup(tf.distribute.get_strategy())
    calls = {name: [] for name in metrics}
    for name, metric in metrics.items():
        _spy(metric, calls[name])
    error = None
    try:
        for start in range(0, n, GLOBAL_BATCH):
            end = min(n, start + GLOBAL_BATCH)
            submission.update_metrics(model, metrics, tf.constant(x[start:end]), tf.constant(y[start:end]))
    except Exception as exc:
        error = {"type": type(exc).__name__, "message": str(exc)}
    values = {name: (None if error else _float(m.result())) for name, m in metrics.items()}
    return {**values, "calls": calls, "error": error}


def epochs(submission, order):
    """evaluate() once per epoch named in `order`, on the real 2-replica MirroredStrategy, same metrics."""
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy()
    model, metrics = _setup(strategy)
    results = []
    for epoch in order:
        n, seed, right = EPOCHS[epoch]
        dataset = tf.data.Dataset.from_tensor_slices(data(n, seed, right)).batch(GLOBAL_BATCH)
        dist_dataset = strategy.experimental_distribute_dataset(dataset)
        results.append(_report(submission.evaluate(strategy, model, metrics, dist_dataset)))
    return {"replicas": int(strategy.num_replicas_in_sync), "results": results}
