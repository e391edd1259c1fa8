"""Probes for tf-lr-scaling: call the learner's scaled_lr, WarmupSchedule and make_optimizer next to their code
and report what came back, as data. Observations only; the hidden tests decide what is right.

`replicas` names a strategy: "mirrored" (the real MirroredStrategy over this grader's 2 logical CPUs), "one"
(MirroredStrategy(devices=["/cpu:0"]), 1 replica) or a number k (a stand-in object with nothing but
`num_replicas_in_sync == k`, for machines with more GPUs than this grader has). TensorFlow is imported inside
the functions so that the judge can import this file cheaply.
"""

import numpy as np

FEATURES = 4


class StandInStrategy:
    """Stands in for a strategy on a machine with k GPUs: only `num_replicas_in_sync` is available."""

    def __init__(self, k: int) -> None:
        self.num_replicas_in_sync = k

    def __repr__(self) -> str:
        return f"<stand-in strategy with num_replicas_in_sync={self.num_replicas_in_sync}>"


def _strategy(replicas):
    import tensorflow as tf

    if replicas == "mirrored":
        return tf.distribute.MirroredStrategy()
    if replicas == "one":
        return tf.distribute.MirroredStrategy(devices=["/cpu:0"])
    return StandInStrategy(int(replicas))


def _number(value):
    """(float or None, a description of what it was)."""
    try:
        shape = list(getattr(value, "shape", []))
        if shape not in ([], [1]):
            return None, f"a tensor of shape {shape}"
        return float(np.asarray(value).reshape(())), type(value).__name__
    except Exception:
        return None, f"{type(value).__name__}: {repr(value)[:160]}"


def _error(exc):
    first = (str(exc).strip().splitlines() or [""])[0]
    if len(first) > 300:  # keep whole sentences
        first = first[: first.rfind(". ", 0, 300) + 1] or first[:300]
    return {"type": type(exc).__name__, "message": first.rstrip(".")}


def scaled(submission, base_lr, base_batch, per_replica_batch, replicas):
    strategy = _strategy(replicas)
    try:
        value = submission.scaled_lr(base_lr, base_batch, per_replica_batch, strategy)
    except Exception as exc:
        return {"error": _error(exc)}
    number, kind = _number(value)
    return {"value": number, "type": kind, "is_bool": isinstance(value, bool)}


def schedule_values(submission, target_lr, warmup_steps, steps):
    """Build WarmupSchedule(target_lr, warmup_steps); call it on int64 scalar tensors, eagerly and in a tf.function.

    Keras calls a schedule with the optimizer's step counter, an int64 variable, inside the compiled train
    step, so the graph mode is what fit really does.
    """
    import keras
    import tensorflow as tf

    seen = {"error": None, "is_schedule": False, "eager": None, "graph": None, "dtype": None}
    try:
        schedule = submission.WarmupSchedule(target_lr, warmup_steps)
    except Exception as exc:
        seen["error"] = _error(exc)
        return seen
    seen["is_schedule"] = isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule)
    try:
        values = [schedule(tf.constant(s, dtype=tf.int64)) for s in steps]
        seen["eager"] = [_number(v)[0] for v in values]
        seen["dtype"] = str(getattr(values[0], "dtype", type(values[0]).__name__)) if values else None
    except Exception as exc:
        seen["eager"] = _error(exc)
    try:
        counter = tf.Variable(0, dtype=tf.int64)

        # autograph=False, like the call inside fit: Keras's own code is never converted by AutoGraph, so a
        # schedule called from it runs as plain Python on symbolic tensors.
        @tf.function(autograph=False)
        def at_step(step):
            counter.assign(step)
            return schedule(counter)

        seen["graph"] = [_number(at_step(tf.constant(s, dtype=tf.int64)))[0] for s in steps]
    except Exception as exc:
        seen["graph"] = _error(exc)
    return seen


def schedule_rejects(submission, target_lr, warmup_steps):
    try:
        schedule = submission.WarmupSchedule(target_lr, warmup_steps)
    except Exception as exc:
        return {"raised": _error(exc)}
    return {"raised": None, "repr": repr(schedule)[:200]}


def schedule_round_trip(submission, target_lr, warmup_steps, steps):
    """get_config -> from_config, then the rebuilt schedule's values; and what an optimizer's config holds."""
    import keras
    import tensorflow as tf

    seen = {"config": None, "config_error": None, "rebuilt": None, "rebuilt_error": None, "call_error": None,
            "optimizer_error": None}
    schedule = submission.WarmupSchedule(target_lr, warmup_steps)
    try:
        config = schedule.get_config()
        seen["config"] = repr(config)[:300]
    except Exception as exc:
        seen["config_error"] = _error(exc)
        return seen
    try:
        again = type(schedule).from_config(config)
    except Exception as exc:
        seen["rebuilt_error"] = _error(exc)
    else:
        try:  # a failure here is the schedule's own call, not its config: reported apart
            seen["rebuilt"] = [_number(again(tf.constant(s, dtype=tf.int64)))[0] for s in steps]
        except Exception as exc:
            seen["call_error"] = _error(exc)
    try:  # the original's values at the same steps, so that the test can tell a faithful copy of a wrong ramp
        seen["original"] = [_number(schedule(tf.constant(s, dtype=tf.int64)))[0] for s in steps]
    except Exception:
        seen["original"] = None
    try:
        keras.optimizers.SGD(learning_rate=schedule).get_config()
    except Exception as exc:
        seen["optimizer_error"] = _error(exc)
    return seen


def data(n, seed=0):
    rs = np.random.RandomState(seed)
    x = rs.randn(n, FEATURES).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32") + 0.5).astype("float32")
    return x, y


def fit_lrs(submission, base_lr, base_batch, per_replica_batch, warmup_steps, n):
    """make_optimizer on the real 2-replica strategy, then compile a Dense(1) under its scope and fit one epoch
    of n examples in global batches; record the optimizer's learning rate before every step."""
    import keras
    import tensorflow as tf

    strategy = tf.distribute.MirroredStrategy()
    seen = {"replicas": int(strategy.num_replicas_in_sync), "error": None, "lrs": [], "optimizer": None,
            "is_sgd": False, "momentum": None, "iterations": None, "steps": None, "loss": None, "rate": None}
    try:
        optimizer = submission.make_optimizer(strategy, base_lr, base_batch, per_replica_batch, warmup_steps)
    except Exception as exc:
        seen["error"] = {"where": "make_optimizer", **_error(exc)}
        return seen
    seen["optimizer"] = "None" if optimizer is None else type(optimizer).__name__
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        return seen
    # What the optimizer holds as its learning rate: the learner's WarmupSchedule, another schedule, or a number.
    rate = getattr(optimizer, "_learning_rate", None)
    mine = getattr(submission, "WarmupSchedule", None)
    if isinstance(mine, type) and isinstance(rate, mine):
        seen["rate"] = "WarmupSchedule"
    elif isinstance(rate, keras.optimizers.schedules.LearningRateSchedule):
        seen["rate"] = type(rate).__name__
    else:
        seen["rate"] = "number"
    seen["is_sgd"] = isinstance(optimizer, keras.optimizers.SGD)
    seen["momentum"] = _number(getattr(optimizer, "momentum", None))[0]
    iterations = getattr(optimizer, "iterations", None)
    seen["iterations"] = type(getattr(iterations, "value", iterations)).__name__
    lrs = seen["lrs"]

    class Record(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            lrs.append(_number(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate))[0])

    x, y = data(n)
    global_batch = per_replica_batch * strategy.num_replicas_in_sync
    try:
        with strategy.scope():
            keras.utils.set_random_seed(0)
            model = keras.Sequential([keras.Input(shape=(FEATURES,)), keras.layers.Dense(1)])
            model.compile(optimizer=optimizer, loss="mse")
        history = model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch), epochs=1, verbose=0,
                            callbacks=[Record()])
        seen["loss"] = float(history.history["loss"][-1])
        seen["steps"] = int(optimizer.iterations.numpy())
    except Exception as exc:
        seen["error"] = {"where": "fit", **_error(exc)}
    return seen
