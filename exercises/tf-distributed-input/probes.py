"""Probes: build the learner's distributed datasets (or call their dataset_fn with a given InputContext) and
report, for every step and replica, which examples arrived.

Example i has features [i, i / 10, 1] and label (3 * i) % 7, so the judge can tell from a batch which examples
it holds and whether features and labels stayed paired. TensorFlow is imported inside the functions so that the
judge can import this file cheaply.
"""

import numpy as np

MAX_STEPS = 200  # a dataset that never ends (.repeat()) is cut here


def data(n: int):
    rows = np.arange(n, dtype="float32")
    x = np.stack([rows, rows / 10, np.ones(n, dtype="float32")], axis=1)
    y = (np.arange(n) * 3 % 7).astype("int64")
    return x, y


def _examples(fx, fy):
    """The example ids (first feature) and labels of one batch."""
    return {"rows": [int(round(v)) for v in np.asarray(fx).reshape(-1, 3)[:, 0]],
            "labels": [int(v) for v in np.asarray(fy).reshape(-1)]}


def _distributed(strategy, dist):
    """Every step of a distributed dataset: per replica, the examples it got."""
    seen = {"type": type(dist).__name__, "steps": [], "truncated": False, "bad_element": None}
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
        seen["steps"].append([_examples(a, b) for a, b in zip(parts_x, parts_y)])
    return seen


def batched(submission, n, global_batch):
    """distribute_batched over the real 2-replica MirroredStrategy."""
    import tensorflow as tf

    x, y = data(n)
    strategy = tf.distribute.MirroredStrategy()
    seen = _distributed(strategy, submission.distribute_batched(strategy, x, y, global_batch))
    seen["replicas"] = int(strategy.num_replicas_in_sync)
    return seen


def from_function(submission, n, global_batch):
    """distribute_from_function over the real 2-replica MirroredStrategy."""
    import tensorflow as tf

    x, y = data(n)
    strategy = tf.distribute.MirroredStrategy()
    seen = _distributed(strategy, submission.distribute_from_function(strategy, x, y, global_batch))
    seen["replicas"] = int(strategy.num_replicas_in_sync)
    return seen


def pipeline(submission, n, global_batch, num_input_pipelines, input_pipeline_id, num_replicas_in_sync):
    """Call the learner's dataset_fn with an InputContext as worker `input_pipeline_id` of a larger job sees it."""
    import tensorflow as tf

    x, y = data(n)
    context = tf.distribute.InputContext(num_input_pipelines=num_input_pipelines,
                                         input_pipeline_id=input_pipeline_id,
                                         num_replicas_in_sync=num_replicas_in_sync)
    dataset_fn = submission.make_dataset_fn(x, y, global_batch)
    dataset = dataset_fn(context)
    seen = {"type": type(dataset).__name__, "is_dataset": isinstance(dataset, tf.data.Dataset), "batches": [],
            "truncated": False, "bad_element": None}
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
    return seen
