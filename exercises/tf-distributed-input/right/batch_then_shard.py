import tensorflow as tf


def distribute_batched(strategy, x, y, global_batch_size):
    features = tf.data.Dataset.from_tensor_slices(x)
    labels = tf.data.Dataset.from_tensor_slices(y)
    return strategy.experimental_distribute_dataset(tf.data.Dataset.zip((features, labels)).batch(global_batch_size))


def make_dataset_fn(x, y, global_batch_size):
    def dataset_fn(ctx):
        per_replica = ctx.get_per_replica_batch_size(global_batch_size)
        # Whole per-replica batches are dealt out to the pipelines: still disjoint, still every example once.
        batches = tf.data.Dataset.from_tensor_slices((x, y)).batch(per_replica)
        return batches.shard(ctx.num_input_pipelines, ctx.input_pipeline_id).prefetch(tf.data.AUTOTUNE)

    return dataset_fn


def distribute_from_function(strategy, x, y, global_batch_size):
    return strategy.distribute_datasets_from_function(lambda ctx: make_dataset_fn(x, y, global_batch_size)(ctx))
