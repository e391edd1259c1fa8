from dataclasses import dataclass

import numpy as np
import tensorflow as tf


@dataclass
class ShardedInput:
    """A dataset_fn as an object: the strategy calls it with the pipeline's InputContext."""

    x: np.ndarray
    y: np.ndarray
    global_batch_size: int

    def __call__(self, input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        count, index = input_context.num_input_pipelines, input_context.input_pipeline_id
        mine = np.arange(len(self.x)) % count == index
        dataset = tf.data.Dataset.from_tensor_slices((self.x[mine], self.y[mine]))
        return dataset.batch(input_context.get_per_replica_batch_size(self.global_batch_size))


def make_dataset_fn(x, y, global_batch_size):
    return ShardedInput(np.asarray(x), np.asarray(y), global_batch_size)


def distribute_batched(strategy, x, y, global_batch_size):
    dataset = tf.data.Dataset.from_tensor_slices({"x": x, "y": y}).batch(global_batch_size)
    return strategy.experimental_distribute_dataset(dataset.map(lambda d: (d["x"], d["y"])))


def distribute_from_function(strategy, x, y, global_batch_size):
    dataset_fn = make_dataset_fn(x, y, global_batch_size)
    return strategy.distribute_datasets_from_function(dataset_fn)
