import math

import tensorflow as tf


def global_batch_size(per_replica_batch, strategy):
    """Return how many examples one training step takes across all replicas of `strategy`.

    Use only `strategy.num_replicas_in_sync`; the tests also pass strategies for other device counts.
    """
    gb = per_replica_batch * strategy.num_replicas_in_sync
    assert gb % strategy.num_replicas_in_sync == 0
    return gb


def make_dataset(features, labels, per_replica_batch, strategy):
    """Return a tf.data.Dataset of (features_batch, labels_batch) pairs.

    Batches hold the global batch size (per_replica_batch on each replica), the examples stay in the
    given order, and the last batch may be smaller: every example appears exactly once.
    """
    gb = global_batch_size(per_replica_batch, strategy)
    # pairs of (row, label), then group them into global batches
    pairs = tf.data.Dataset.from_tensor_slices({"x": features, "y": labels})
    pairs = pairs.map(lambda d: (d["x"], d["y"]))
    ds = pairs.batch(gb, drop_remainder=False)
    tf.get_logger().info("global batch %d over %d replica(s)", gb, strategy.num_replicas_in_sync)
    return ds


def my_global_batch():
    """Return how many examples one step of your run takes (your run's numbers are in your prompt)."""
    per_replica, gpus = {{ params.batch_per_replica }}, {{ params.gpus }}
    return per_replica * gpus


def my_steps_per_epoch():
    """Return how many batches of make_dataset one epoch of your run takes."""
    return math.ceil({{ params.examples }} / my_global_batch())
