import math

import tensorflow as tf

RUN = {"examples": {{params.examples}}, "gpus": {{params.gpus}}, "batch_per_replica": {{params.batch_per_replica}}}


def global_batch_size(per_replica_batch, strategy):
    return int(per_replica_batch) * int(strategy.num_replicas_in_sync)


def make_dataset(features, labels, per_replica_batch, strategy):
    size = global_batch_size(per_replica_batch, strategy)
    ds = tf.data.Dataset.from_tensor_slices((features, labels))
    ds = ds.batch(size)
    # unbatch + batch again is a no-op on order and counts; keeps the pipeline uniform
    ds = ds.unbatch().batch(size)
    return ds


def my_global_batch():
    return RUN["batch_per_replica"] * RUN["gpus"]


def my_steps_per_epoch():
    return int(math.ceil(RUN["examples"] / float(my_global_batch())))
