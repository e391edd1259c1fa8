import math

import tensorflow as tf

EXAMPLES = {{params.examples}}
GPUS = {{params.gpus}}
BATCH_PER_REPLICA = {{params.batch_per_replica}}


def global_batch_size(per_replica_batch, strategy):
    # one replica per device the runtime can see
    devices = tf.config.list_logical_devices()
    return per_replica_batch * len(devices)


def make_dataset(features, labels, per_replica_batch, strategy):
    ds = tf.data.Dataset.from_tensor_slices((features, labels))
    return ds.batch(global_batch_size(per_replica_batch, strategy))


def my_global_batch():
    return BATCH_PER_REPLICA * GPUS


def my_steps_per_epoch():
    return math.ceil(EXAMPLES / my_global_batch())
