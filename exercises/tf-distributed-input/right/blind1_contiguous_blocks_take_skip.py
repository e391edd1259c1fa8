import tensorflow as tf


def distribute_batched(strategy, x, y, global_batch_size):
    """Return strategy.experimental_distribute_dataset(...) of the (x, y) examples, in order, so that every
    step gives each replica global_batch_size / num_replicas_in_sync examples."""
    # One pipeline batched by the GLOBAL size; the strategy cuts each batch into one slice per replica.
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch_size, drop_remainder=True)
    return strategy.experimental_distribute_dataset(dataset)


def make_dataset_fn(x, y, global_batch_size):
    """Return a function dataset_fn(input_context) -> tf.data.Dataset of (x, y) batches.

    The dataset holds this input pipeline's share of the examples (the pipelines together read every example
    once), batched by the per-replica batch size.
    """
    n = len(x)

    def dataset_fn(input_context):
        # Each pipeline reads one contiguous block of the data: pipeline i gets
        # examples [i * n / P, (i + 1) * n / P).
        num_pipelines = input_context.num_input_pipelines
        block = n // num_pipelines
        start = input_context.input_pipeline_id * block
        batch_size = input_context.get_per_replica_batch_size(global_batch_size)
        dataset = tf.data.Dataset.from_tensor_slices((x, y))
        dataset = dataset.skip(start).take(block)
        return dataset.batch(batch_size)

    return dataset_fn


def distribute_from_function(strategy, x, y, global_batch_size):
    """Return strategy.distribute_datasets_from_function(...) built from make_dataset_fn."""
    return strategy.distribute_datasets_from_function(make_dataset_fn(x, y, global_batch_size))
