import tensorflow as tf


def global_batch_size(per_replica_batch, strategy):
    return per_replica_batch  # Mistake: the per-replica size is not the global size


def make_dataset(features, labels, per_replica_batch, strategy):
    ds = tf.data.Dataset.from_tensor_slices((features, labels))
    return ds.batch(global_batch_size(per_replica_batch, strategy))


def my_global_batch():
    return {{ params.batch_per_replica }} * {{ params.gpus }}


def my_steps_per_epoch():
    return -(-{{ params.examples }} // my_global_batch())
