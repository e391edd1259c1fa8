import numpy as np
import tensorflow as tf


def global_batch_size(per_replica_batch, strategy):
    return strategy.num_replicas_in_sync * per_replica_batch


def make_dataset(features, labels, per_replica_batch, strategy):
    features = np.asarray(features)
    labels = np.asarray(labels)
    size = global_batch_size(per_replica_batch, strategy)

    def chunks():
        for start in range(0, len(features), size):
            yield features[start:start + size], labels[start:start + size]

    spec = (
        tf.TensorSpec(shape=(None,) + features.shape[1:], dtype=tf.as_dtype(features.dtype)),
        tf.TensorSpec(shape=(None,), dtype=tf.as_dtype(labels.dtype)),
    )
    return tf.data.Dataset.from_generator(chunks, output_signature=spec).cache()


def my_global_batch():
    return {{ params.gpus }} * {{ params.batch_per_replica }}


def my_steps_per_epoch():
    full, rest = divmod({{ params.examples }}, my_global_batch())
    return full + (1 if rest else 0)
