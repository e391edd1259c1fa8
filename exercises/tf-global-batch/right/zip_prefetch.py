import tensorflow as tf


def global_batch_size(per_replica_batch, strategy):
    replicas = strategy.num_replicas_in_sync
    return int(per_replica_batch) * int(replicas)


def make_dataset(features, labels, per_replica_batch, strategy):
    xs = tf.data.Dataset.from_tensor_slices(features)
    ys = tf.data.Dataset.from_tensor_slices(labels)
    batch = global_batch_size(per_replica_batch, strategy)
    return tf.data.Dataset.zip((xs, ys)).batch(batch, drop_remainder=False).prefetch(tf.data.AUTOTUNE)


def my_global_batch():
    return global_batch_size({{ params.batch_per_replica }}, type("Run", (), {"num_replicas_in_sync": {{ params.gpus }}})())


def my_steps_per_epoch():
    import math

    return math.ceil({{ params.examples }} / my_global_batch())
