import tensorflow as tf


def global_batch_size(per_replica_batch, strategy):
    replicas = strategy.num_replicas_in_sync
    return int(per_replica_batch) * int(replicas)


def make_dataset(features, labels, per_replica_batch, strategy):
    xs = tf.data.Dataset.from_tensor_slices(features)
    ys = tf.data.Dataset.from_tensor_slices(labels)
    batch = global_batch_size(per_replica_batch, strategy)
    return tf.data.Dataset.zip((xs, ys)).batch(batch, drop_remainder=False).prefetch(tf.data.AUTOTUNE)
