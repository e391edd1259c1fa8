import tensorflow as tf


def distribute_batched(strategy, x, y, global_batch_size):
    """Return strategy.experimental_distribute_dataset(...) of the (x, y) examples, in order, so that every
    step gives each replica global_batch_size / num_replicas_in_sync examples."""
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch_size)
    return strategy.experimental_distribute_dataset(dataset)


def make_dataset_fn(x, y, global_batch_size):
    """Return a function dataset_fn(input_context) -> tf.data.Dataset of (x, y) batches.

    The dataset holds this input pipeline's share of the examples (the pipelines together read every example
    once), batched by the per-replica batch size.
    """

    def dataset_fn(input_context):
        per_replica_batch = input_context.get_per_replica_batch_size(global_batch_size)
        features = tf.data.Dataset.from_tensor_slices(x)
        labels = tf.data.Dataset.from_tensor_slices(y)
        features = features.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
        dataset = tf.data.Dataset.zip((features, labels))
        return dataset.batch(per_replica_batch)

    return dataset_fn


def distribute_from_function(strategy, x, y, global_batch_size):
    """Return strategy.distribute_datasets_from_function(...) built from make_dataset_fn."""
    return strategy.distribute_datasets_from_function(make_dataset_fn(x, y, global_batch_size))
