import keras  # noqa: F401 - keras.losses holds the per-example loss
import tensorflow as tf  # noqa: F401 - tf.GradientTape, tf.nn.compute_average_loss, tf.distribute


def train_step(model, optimizer, x, y, global_batch_size):
    """Run on ONE replica: compute this replica's loss, apply the gradients, return the loss.

    The loss is the sum of the per-example sparse categorical cross-entropies of `model(x)` (logits)
    divided by `global_batch_size`.
    """
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        per_example = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        loss = tf.reduce_sum(per_example) / tf.cast(global_batch_size, per_example.dtype)
    variables = model.trainable_variables
    grads = tape.gradient(loss, variables)
    optimizer.apply_gradients(zip(grads, variables))
    return loss


@tf.function
def distributed_train_step(strategy, model, optimizer, batch, global_batch_size):
    """`batch` = (x, y) from strategy.experimental_distribute_dataset. Run train_step on every replica
    and return the mean loss over the whole global batch as a scalar tensor."""
    per_replica_losses = strategy.run(train_step, args=(model, optimizer, batch[0], batch[1], global_batch_size))
    # each replica's loss is already its share of the global mean: add the shares
    return strategy.reduce("SUM", per_replica_losses, axis=None)
