import tensorflow as tf


def global_batch_size(per_replica_batch, strategy):
    """Examples per training step across all replicas: each replica gets per_replica_batch of them."""
    return per_replica_batch * strategy.num_replicas_in_sync


def make_dataset(features, labels, per_replica_batch, strategy):
    """(features, labels) batches of the global size, in order; the last batch may be smaller."""
    ds = tf.data.Dataset.from_tensor_slices((features, labels))
    return ds.batch(global_batch_size(per_replica_batch, strategy))


# This learner's run, from their prompt.
EXAMPLES = {{ params.examples }}
GPUS = {{ params.gpus }}
PER_REPLICA_BATCH = {{ params.batch_per_replica }}


def my_global_batch():
    return PER_REPLICA_BATCH * GPUS


def my_steps_per_epoch():
    """Every example once, the last batch smaller: ceil(examples / global batch)."""
    return -(-EXAMPLES // my_global_batch())
