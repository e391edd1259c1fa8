import tensorflow as tf


def global_batch_size(per_replica_batch, strategy):
    return per_replica_batch * strategy.num_replicas_in_sync


def make_dataset(features, labels, per_replica_batch, strategy):
    ds = tf.data.Dataset.from_tensor_slices((features, labels))
    # Mistake: the last, partial batch is thrown away.
    return ds.batch(global_batch_size(per_replica_batch, strategy), drop_remainder=True)


def my_global_batch():
    return {{ params.batch_per_replica }} * {{ params.gpus }}


def my_steps_per_epoch():
    return {{ params.examples }} // my_global_batch()  # the same mistake: the partial batch is not a step
