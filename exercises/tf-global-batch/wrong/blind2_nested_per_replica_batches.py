import math

import tensorflow as tf

EXAMPLES = {{params.examples}}
GPUS = {{params.gpus}}
BATCH_PER_REPLICA = {{params.batch_per_replica}}


def global_batch_size(per_replica_batch, strategy):
    return per_replica_batch * strategy.num_replicas_in_sync


def make_dataset(features, labels, per_replica_batch, strategy):
    ds = tf.data.Dataset.from_tensor_slices((features, labels))
    # one slice per replica, then group the slices into one step
    ds = ds.batch(per_replica_batch)
    ds = ds.batch(strategy.num_replicas_in_sync)
    return ds


def my_global_batch():
    return BATCH_PER_REPLICA * GPUS


def my_steps_per_epoch():
    return math.ceil(EXAMPLES / my_global_batch())
