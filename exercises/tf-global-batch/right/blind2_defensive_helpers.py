"""Global batch for tf.distribute.MirroredStrategy."""

import math

import numpy as np
import tensorflow as tf

# My run (from the prompt).
EXAMPLES = {{params.examples}}
GPUS = {{params.gpus}}
BATCH_PER_REPLICA = {{params.batch_per_replica}}


def _replicas(strategy):
    n = strategy.num_replicas_in_sync
    if int(n) < 1:
        raise ValueError(f"strategy reports {n} replicas")
    return int(n)


def global_batch_size(per_replica_batch, strategy):
    """Return how many examples one training step takes across all replicas of `strategy`."""
    per_replica_batch = int(per_replica_batch)
    if per_replica_batch < 1:
        raise ValueError("per_replica_batch must be positive")
    return per_replica_batch * _replicas(strategy)


def make_dataset(features, labels, per_replica_batch, strategy):
    """Return a tf.data.Dataset of (features_batch, labels_batch) pairs."""
    features = np.asarray(features)
    labels = np.asarray(labels)
    if features.shape[0] != labels.shape[0]:
        raise ValueError(f"{features.shape[0]} features but {labels.shape[0]} labels")
    batch = global_batch_size(per_replica_batch, strategy)
    print(
        f"make_dataset: {features.shape[0]} examples, global batch {batch} "
        f"({per_replica_batch} x {_replicas(strategy)} replicas)"
    )
    dataset = tf.data.Dataset.from_tensor_slices((features, labels))
    return dataset.batch(batch, drop_remainder=False)


def my_global_batch():
    """Return how many examples one step of your run takes."""
    return BATCH_PER_REPLICA * GPUS


def my_steps_per_epoch():
    """Return how many batches of make_dataset one epoch of your run takes."""
    steps = math.ceil(EXAMPLES / my_global_batch())
    assert (steps - 1) * my_global_batch() < EXAMPLES <= steps * my_global_batch()
    return steps
