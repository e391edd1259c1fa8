import tensorflow as tf


def global_batch_size(per_replica_batch, strategy):
    replicas = strategy.num_replicas_in_sync
    total = 0
    for _ in range(replicas):
        total += per_replica_batch
    return total


def make_dataset(features, labels, per_replica_batch, strategy):
    n = len(features)
    x = tf.constant(features)
    y = tf.constant(labels)
    indices = tf.data.Dataset.range(n).batch(global_batch_size(per_replica_batch, strategy))
    return indices.map(lambda idx: (tf.gather(x, idx), tf.gather(y, idx)))


def my_global_batch():
    examples, gpus, per_replica = {{params.examples}}, {{params.gpus}}, {{params.batch_per_replica}}
    return per_replica * gpus


def my_steps_per_epoch():
    examples = {{params.examples}}
    return -(-examples // my_global_batch())
