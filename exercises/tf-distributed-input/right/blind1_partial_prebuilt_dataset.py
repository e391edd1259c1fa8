import functools

import tensorflow as tf


def distribute_batched(strategy, x, y, global_batch_size):
    """Return strategy.experimental_distribute_dataset(...) of the (x, y) examples, in order, so that every
    step gives each replica global_batch_size / num_replicas_in_sync examples."""
    per_replica = global_batch_size // strategy.num_replicas_in_sync
    print(f"[distribute_batched] {strategy.num_replicas_in_sync} replicas x {per_replica} examples per step")
    examples = tf.data.Dataset.from_tensor_slices((x, y))
    return strategy.experimental_distribute_dataset(examples.batch(per_replica * strategy.num_replicas_in_sync))


def _dataset_for_pipeline(examples, global_batch_size, input_context):
    """Shard the example dataset by pipeline, then batch by the per-replica size."""
    per_replica = global_batch_size // input_context.num_replicas_in_sync
    mine = examples.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    print(f"[dataset_fn] pipeline {input_context.input_pipeline_id} of {input_context.num_input_pipelines}: "
          f"batches of {per_replica}")
    return mine.batch(per_replica)


def make_dataset_fn(x, y, global_batch_size):
    """Return a function dataset_fn(input_context) -> tf.data.Dataset of (x, y) batches.

    The dataset holds this input pipeline's share of the examples (the pipelines together read every example
    once), batched by the per-replica batch size.
    """
    examples = tf.data.Dataset.from_tensor_slices((x, y))
    return functools.partial(_dataset_for_pipeline, examples, global_batch_size)


def distribute_from_function(strategy, x, y, global_batch_size):
    """Return strategy.distribute_datasets_from_function(...) built from make_dataset_fn."""
    dataset_fn = make_dataset_fn(x, y, global_batch_size)
    return strategy.distribute_datasets_from_function(dataset_fn)
