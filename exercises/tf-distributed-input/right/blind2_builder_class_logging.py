import logging

import tensorflow as tf

log = logging.getLogger(__name__)


class _PipelineBuilder:
    """Builds one input pipeline's dataset for distribute_datasets_from_function."""

    def __init__(self, x, y, global_batch_size):
        self.x, self.y, self.global_batch_size = x, y, global_batch_size

    def build(self, input_context):
        per_replica_batch = input_context.get_per_replica_batch_size(self.global_batch_size)
        log.info("pipeline %d/%d: batches of %d for %d replicas in sync",
                 input_context.input_pipeline_id, input_context.num_input_pipelines,
                 per_replica_batch, input_context.num_replicas_in_sync)
        dataset = tf.data.Dataset.from_tensor_slices((self.x, self.y))
        dataset = dataset.shard(num_shards=input_context.num_input_pipelines, index=input_context.input_pipeline_id)
        dataset = dataset.batch(per_replica_batch)
        return dataset.prefetch(2)


def distribute_batched(strategy, x, y, global_batch_size):
    """Return strategy.experimental_distribute_dataset(...) of the (x, y) examples, in order, so that every
    step gives each replica global_batch_size / num_replicas_in_sync examples."""
    log.info("global batch %d over %d replicas", global_batch_size, strategy.num_replicas_in_sync)
    dataset = tf.data.Dataset.from_tensor_slices((x, y))
    dataset = dataset.batch(global_batch_size)
    return strategy.experimental_distribute_dataset(dataset)


def make_dataset_fn(x, y, global_batch_size):
    """Return a function dataset_fn(input_context) -> tf.data.Dataset of (x, y) batches.

    The dataset holds this input pipeline's share of the examples (the pipelines together read every example
    once), batched by the per-replica batch size.
    """
    return _PipelineBuilder(x, y, global_batch_size).build


def distribute_from_function(strategy, x, y, global_batch_size):
    """Return strategy.distribute_datasets_from_function(...) built from make_dataset_fn."""
    return strategy.distribute_datasets_from_function(make_dataset_fn(x, y, global_batch_size))
