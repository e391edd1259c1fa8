import tensorflow as tf


def distribute_batched(strategy, x, y, global_batch_size):
    """Return strategy.experimental_distribute_dataset(...) of the (x, y) examples, in order, so that every
    step gives each replica global_batch_size / num_replicas_in_sync examples."""
    if global_batch_size % strategy.num_replicas_in_sync:
        raise ValueError("the global batch must split evenly over the replicas")
    features = tf.data.Dataset.from_tensor_slices(x)
    labels = tf.data.Dataset.from_tensor_slices(y)
    dataset = tf.data.Dataset.zip((features, labels))
    dataset = dataset.batch(global_batch_size, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    return strategy.experimental_distribute_dataset(dataset)


def make_dataset_fn(x, y, global_batch_size):
    """Return a function dataset_fn(input_context) -> tf.data.Dataset of (x, y) batches.

    The dataset holds this input pipeline's share of the examples (the pipelines together read every example
    once), batched by the per-replica batch size.
    """

    def dataset_fn(input_context):
        replicas = input_context.num_replicas_in_sync
        if global_batch_size % replicas:
            raise ValueError(f"global batch {global_batch_size} does not split over {replicas} replicas")
        per_replica_batch = global_batch_size // replicas
        pipelines, pipeline_id = input_context.num_input_pipelines, input_context.input_pipeline_id
        # every pipelines-th example starting at this pipeline's id: the same examples as Dataset.shard
        mine = (x[pipeline_id::pipelines], y[pipeline_id::pipelines])
        return tf.data.Dataset.from_tensor_slices(mine).batch(per_replica_batch, drop_remainder=True)

    return dataset_fn


def distribute_from_function(strategy, x, y, global_batch_size):
    """Return strategy.distribute_datasets_from_function(...) built from make_dataset_fn."""
    dataset_fn = make_dataset_fn(x, y, global_batch_size)
    return strategy.distribute_datasets_from_function(dataset_fn)
