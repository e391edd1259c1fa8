"""Probes: call the learner's global_batch_size / make_dataset with a real or stand-in strategy, report data.

`replicas` names the strategy: "mirrored" (the real MirroredStrategy over this grader's 2 logical CPUs),
"one" (MirroredStrategy(devices=["/cpu:0"]), 1 replica) or a number k (a stand-in object that only has
`num_replicas_in_sync == k`, for machines with more GPUs than this grader has). TensorFlow is imported inside
the functions so that the judge can import this file cheaply.

The learner's exceptions are not caught here: they reach the test as the learner's exception (its type's name
and text), and the test words them with runner.feedback.
"""

import numpy as np

MAX_BATCHES = 500


class StandInStrategy:
    """Stands in for a strategy on a machine with k GPUs: only `num_replicas_in_sync` is available."""

    def __init__(self, k: int) -> None:
        self.num_replicas_in_sync = k

    def __repr__(self) -> str:
        return f"<stand-in strategy with num_replicas_in_sync={self.num_replicas_in_sync}>"


class CallableCount(int):
    """A replica count that also answers when called: tells `strategy.num_replicas_in_sync()` apart."""

    def __call__(self) -> int:
        return int(self)


def data(n: int, features: int = 4, seed: int = 0):
    """The examples the tests send: row i of the features starts with i, label i is i % 7."""
    x = np.random.RandomState(seed).rand(n, features).astype("float32")
    x[:, 0] = np.arange(n, dtype="float32")
    y = (np.arange(n) % 7).astype("int64")
    return x, y


def _strategy(replicas, callable_count=False):
    import tensorflow as tf

    if replicas == "mirrored":
        return tf.distribute.MirroredStrategy()
    if replicas == "one":
        return tf.distribute.MirroredStrategy(devices=["/cpu:0"])
    k = int(replicas)
    return StandInStrategy(CallableCount(k) if callable_count else k)


def global_size(submission, per_replica_batch, replicas, callable_count=False, in_mirrored_scope=False):
    """What global_batch_size returns. `callable_count`: the stand-in's count may also be called like a method;
    `in_mirrored_scope`: the call runs inside the scope of the real 2-replica MirroredStrategy (the argument is
    still the strategy `replicas` names)."""
    strategy = _strategy(replicas, callable_count)
    if in_mirrored_scope:
        import tensorflow as tf

        with tf.distribute.MirroredStrategy().scope():
            value = submission.global_batch_size(per_replica_batch, strategy)
    else:
        value = submission.global_batch_size(per_replica_batch, strategy)
    try:
        as_int = int(value)
    except Exception:
        as_int = None
    return {
        "type": type(value).__name__,
        "value": as_int,
        "repr": repr(value)[:200],
        "replicas": int(strategy.num_replicas_in_sync),
    }


def _shape(t):
    try:
        return [int(d) if d is not None else None for d in t.shape]
    except Exception:
        return None


def batches(submission, n, per_replica_batch, replicas):
    """Iterate the learner's dataset and return every batch: each part's shape and values."""
    import tensorflow as tf

    x, y = data(n)
    strategy = _strategy(replicas)
    ds = submission.make_dataset(x, y, per_replica_batch, strategy)
    seen = {
        "type": type(ds).__name__,
        "is_dataset": isinstance(ds, tf.data.Dataset),
        "batches": [],
        "truncated": False,
        "element": None,
    }
    if not seen["is_dataset"]:
        return seen
    seen["element"] = repr(ds.element_spec)[:300]
    for i, element in enumerate(ds):
        if i >= MAX_BATCHES:
            seen["truncated"] = True
            break
        if not isinstance(element, (tuple, list)) or len(element) != 2:
            seen["batches"].append({"bad_element": type(element).__name__})
            break
        fx, fy = element
        seen["batches"].append(
            {"x": np.asarray(fx).tolist(), "y": np.asarray(fy).tolist(), "x_shape": _shape(fx), "y_shape": _shape(fy)}
        )
    return seen


def replica_shapes(submission, n, per_replica_batch):
    """Distribute the learner's dataset over the real 2-replica strategy; report each replica's shapes per step
    (features first, labels second), or what make_dataset returned when it is no tf.data.Dataset."""
    import tensorflow as tf

    x, y = data(n)
    strategy = tf.distribute.MirroredStrategy()
    ds = submission.make_dataset(x, y, per_replica_batch, strategy)
    seen = {
        "type": type(ds).__name__,
        "is_dataset": isinstance(ds, tf.data.Dataset),
        "steps": [],
        "bad_element": None,
        "truncated": False,
    }
    if not seen["is_dataset"]:
        return seen
    for i, element in enumerate(strategy.experimental_distribute_dataset(ds)):
        if i >= MAX_BATCHES:
            seen["truncated"] = True
            break
        if not isinstance(element, (tuple, list)) or len(element) != 2:
            seen["bad_element"] = type(element).__name__
            break
        fx, fy = element
        seen["steps"].append(
            {
                "x": [_shape(t) for t in strategy.experimental_local_results(fx)],
                "y": [_shape(t) for t in strategy.experimental_local_results(fy)],
            }
        )
    return seen
