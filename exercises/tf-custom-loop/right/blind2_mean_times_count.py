import keras  # noqa: F401 - keras.losses holds the per-example loss
import tensorflow as tf  # noqa: F401 - tf.GradientTape, tf.nn.compute_average_loss, tf.distribute


def _per_example_losses(model, x, y):
    logits = model(x, training=True)
    return keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)


def train_step(model, optimizer, x, y, global_batch_size):
    """Run on ONE replica: compute this replica's loss, apply the gradients, return the loss.

    The loss is the sum of the per-example sparse categorical cross-entropies of `model(x)` (logits)
    divided by `global_batch_size`.
    """
    if isinstance(global_batch_size, int) and global_batch_size <= 0:
        raise ValueError("global_batch_size must be positive")
    with tf.GradientTape() as tape:
        per_example = _per_example_losses(model, x, y)
        # mean over this replica's slice, re-weighted by slice / global batch = sum / global batch
        local_count = tf.cast(tf.shape(per_example)[0], per_example.dtype)
        loss = tf.reduce_mean(per_example) * (local_count / tf.cast(global_batch_size, per_example.dtype))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(list(zip(grads, model.trainable_variables)))
    return loss


def distributed_train_step(strategy, model, optimizer, batch, global_batch_size):
    """`batch` = (x, y) from strategy.experimental_distribute_dataset. Run train_step on every replica
    and return the mean loss over the whole global batch as a scalar tensor."""
    x, y = batch
    per_replica_losses = strategy.run(train_step, kwargs={
        "model": model, "optimizer": optimizer, "x": x, "y": y, "global_batch_size": global_batch_size,
    })
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)
