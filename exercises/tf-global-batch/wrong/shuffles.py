import tensorflow as tf


def global_batch_size(per_replica_batch, strategy):
    return per_replica_batch * strategy.num_replicas_in_sync


def make_dataset(features, labels, per_replica_batch, strategy):
    ds = tf.data.Dataset.from_tensor_slices((features, labels))
    ds = ds.shuffle(len(features), seed=0)  # Mistake: the contract asks for the given order
    return ds.batch(global_batch_size(per_replica_batch, strategy))


def my_global_batch():
    return {{ params.batch_per_replica }} * {{ params.gpus }}


def my_steps_per_epoch():
    return -(-{{ params.examples }} // my_global_batch())
