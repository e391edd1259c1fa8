import math

import tensorflow as tf

EXAMPLES = {{params.examples}}
GPUS = {{params.gpus}}
BATCH_PER_REPLICA = {{params.batch_per_replica}}


def global_batch_size(per_replica_batch, strategy):
    return per_replica_batch * strategy.num_replicas_in_sync


def make_dataset(features, labels, per_replica_batch, strategy):
    ds = tf.data.Dataset.from_tensor_slices((features, labels))
    return ds.batch(global_batch_size(per_replica_batch, strategy))


def my_global_batch():
    return BATCH_PER_REPLICA * GPUS


def my_steps_per_epoch():
    # one step per batch of examples
    return math.ceil(EXAMPLES / BATCH_PER_REPLICA)
