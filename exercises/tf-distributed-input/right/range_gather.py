import tensorflow as tf


def _examples(x, y, num_shards=1, index=0):
    xs, ys = tf.constant(x), tf.constant(y)
    ids = tf.data.Dataset.range(len(x)).shard(num_shards, index)
    return ids.map(lambda i: (tf.gather(xs, i), tf.gather(ys, i)))


def distribute_batched(strategy, x, y, global_batch_size):
    dataset = _examples(x, y).batch(global_batch_size, drop_remainder=True)  # the data fills whole batches
    options = tf.distribute.InputOptions(experimental_fetch_to_device=True)
    return strategy.experimental_distribute_dataset(dataset, options=options)


def make_dataset_fn(x, y, global_batch_size):
    def dataset_fn(input_context):
        per_replica = global_batch_size // input_context.num_replicas_in_sync
        shard = _examples(x, y, input_context.num_input_pipelines, input_context.input_pipeline_id)
        return shard.batch(per_replica, drop_remainder=True)

    return dataset_fn


def distribute_from_function(strategy, x, y, global_batch_size):
    options = tf.distribute.InputOptions(experimental_replication_mode=tf.distribute.InputReplicationMode.PER_WORKER)
    return strategy.distribute_datasets_from_function(make_dataset_fn(x, y, global_batch_size), options=options)
