import operator
from types import SimpleNamespace

import tensorflow as tf

_MY_RUN = SimpleNamespace(
    examples={{params.examples}}, gpus={{params.gpus}}, batch_per_replica={{params.batch_per_replica}}
)


def global_batch_size(per_replica_batch, strategy):
    return operator.mul(per_replica_batch, getattr(strategy, "num_replicas_in_sync"))


def make_dataset(features, labels, per_replica_batch, strategy):
    xs = tf.data.Dataset.from_tensor_slices(features)
    ys = tf.data.Dataset.from_tensor_slices(labels)
    pairs = tf.data.Dataset.zip((xs, ys))
    return pairs.batch(global_batch_size(per_replica_batch, strategy))


def my_global_batch():
    # same formula as for a real strategy, with a stand-in for my 4-GPU machine
    fake_strategy = SimpleNamespace(num_replicas_in_sync=_MY_RUN.gpus)
    return global_batch_size(_MY_RUN.batch_per_replica, fake_strategy)


def my_steps_per_epoch():
    g = my_global_batch()
    return (_MY_RUN.examples + g - 1) // g
