import tensorflow as tf

AUTOTUNE = tf.data.AUTOTUNE


def global_batch_size(per_replica_batch, strategy):
    num_replicas = strategy.num_replicas_in_sync
    gbs = num_replicas * per_replica_batch
    print("replicas:", num_replicas, "per replica:", per_replica_batch, "global:", gbs)
    return gbs


def make_dataset(features, labels, per_replica_batch, strategy):
    gbs = global_batch_size(per_replica_batch, strategy)
    return (
        tf.data.Dataset.from_tensor_slices((features, labels))
        .cache()
        .batch(gbs, drop_remainder=False, num_parallel_calls=AUTOTUNE, deterministic=True)
        .prefetch(AUTOTUNE)
    )


def my_global_batch():
    return {{params.batch_per_replica}} * {{params.gpus}}


def my_steps_per_epoch():
    full, rest = divmod({{params.examples}}, my_global_batch())
    return full + (1 if rest else 0)
