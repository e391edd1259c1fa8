"""Probes: build the learner's distributed datasets (or call their dataset_fn with a given InputContext) and
report, for every step and replica, which examples arrived.

Example i has features [i, i / 10, 1] and label (3 * i) % 7, so the judge can tell from a batch which examples
it holds and whether features and labels stayed paired. TensorFlow is imported inside the functions so that the
judge can import this file cheaply.

An exception of the learner's code is reported as data ("error": type and text), next to what the probe saw
before it: what the learner's code handed to the strategy ("given"), so that the judge can tell a dataset passed
where a function belongs from a failure inside the function.
"""

import numpy as np

MAX_STEPS = 200  # a dataset that never ends (.repeat()) is cut here


def data(n: int):
    rows = np.arange(n, dtype="float32")
    x = np.stack([rows, rows / 10, np.ones(n, dtype="float32")], axis=1)
    y = (np.arange(n) * 3 % 7).astype("int64")
    return x, y


def _examples(fx, fy):
    """The example ids (first feature), labels and the features' shape of one batch."""
    fx = np.asarray(fx)
    return {"rows": [round(float(v)) for v in fx.reshape(-1, 3)[:, 0]] if fx.size % 3 == 0 else [],
            "labels": [int(v) for v in np.asarray(fy).reshape(-1)],
            "shape": [int(d) for d in fx.shape]}


def _error(exc):
    return {"type": type(exc).__name__, "message": str(exc)[:4000]}


def _describe(submission, argument):
    """What the learner's code handed to a strategy method."""
    import tensorflow as tf

    said = {"type": type(argument).__name__, "is_dataset": isinstance(argument, tf.data.Dataset),
            "is_make_dataset_fn": argument is getattr(submission, "make_dataset_fn", None),
            "callable": callable(argument), "feature_shape": None}
    if said["is_dataset"]:
        spec = argument.element_spec
        if isinstance(spec, (tuple, list)) and len(spec) == 2 and isinstance(spec[0], tf.TensorSpec):
            shape = spec[0].shape
            said["feature_shape"] = None if shape.rank is None else [-1 if d is None else int(d) for d in shape]
    return said


def _recording(submission, strategy, name, given):
    """Replace `strategy.<name>` with a wrapper that notes its first argument, then calls the real method."""
    real = getattr(strategy, name)

    def wrapper(argument, *args, **kwargs):
        given.append(_describe(submission, argument))
        return real(argument, *args, **kwargs)

    setattr(strategy, name, wrapper)


def _distributed(strategy, dist, seen):
    """Every step of a distributed dataset: per replica, the examples it got."""
    for i, element in enumerate(dist):
        if i >= MAX_STEPS:
            seen["truncated"] = True
            break
        if not isinstance(element, (tuple, list)) or len(element) != 2:
            seen["bad_element"] = type(element).__name__
            break
        fx, fy = element
        parts_x = strategy.experimental_local_results(fx)
        parts_y = strategy.experimental_local_results(fy)
        seen["steps"].append([_examples(a, b) for a, b in zip(parts_x, parts_y, strict=False)])


def _run(submission, n, global_batch, function, method):
    import tensorflow as tf

    x, y = data(n)
    strategy = tf.distribute.MirroredStrategy()
    seen = {"type": None, "is_dataset": False, "steps": [], "truncated": False, "bad_element": None,
            "given": [], "error": None, "replicas": int(strategy.num_replicas_in_sync)}
    _recording(submission, strategy, method, seen["given"])
    try:
        dist = getattr(submission, function)(strategy, x, y, global_batch)
        seen["type"] = type(dist).__name__
        seen["is_dataset"] = isinstance(dist, tf.data.Dataset)
        _distributed(strategy, dist, seen)
    except Exception as exc:  # the learner's code failed: the judge words it
        seen["error"] = _error(exc)
    return seen


def batched(submission, n, global_batch):
    """distribute_batched over the real 2-replica MirroredStrategy."""
    return _run(submission, n, global_batch, "distribute_batched", "experimental_distribute_dataset")


def from_function(submission, n, global_batch):
    """distribute_from_function over the real 2-replica MirroredStrategy."""
    return _run(submission, n, global_batch, "distribute_from_function", "distribute_datasets_from_function")


def pipeline(submission, n, global_batch, num_input_pipelines, input_pipeline_id, num_replicas_in_sync):
    """Call the learner's dataset_fn with an InputContext as worker `input_pipeline_id` of a larger job sees it."""
    import tensorflow as tf

    x, y = data(n)
    context = tf.distribute.InputContext(num_input_pipelines=num_input_pipelines,
                                         input_pipeline_id=input_pipeline_id,
                                         num_replicas_in_sync=num_replicas_in_sync)
    seen = {"type": None, "is_dataset": False, "batches": [], "truncated": False, "bad_element": None,
            "error": None}
    try:
        dataset_fn = submission.make_dataset_fn(x, y, global_batch)
        dataset = dataset_fn(context)
        seen["type"] = type(dataset).__name__
        seen["is_dataset"] = isinstance(dataset, tf.data.Dataset)
        if not seen["is_dataset"]:
            return seen
        for i, element in enumerate(dataset):
            if i >= MAX_STEPS:
                seen["truncated"] = True
                break
            if not isinstance(element, (tuple, list)) or len(element) != 2:
                seen["bad_element"] = type(element).__name__
                break
            seen["batches"].append(_examples(*element))
    except Exception as exc:  # the learner's code failed: the judge words it
        seen["error"] = _error(exc)
    return seen
