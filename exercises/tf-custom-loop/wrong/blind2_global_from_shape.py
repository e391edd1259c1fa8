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
        # global batch = this replica's slice times the number of replicas
        num_replicas = tf.distribute.get_replica_context().num_replicas_in_sync
        global_bs = tf.shape(per_example)[0] * num_replicas
        loss = tf.reduce_sum(per_example) / tf.cast(global_bs, per_example.dtype)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def distributed_train_step(strategy, model, optimizer, batch, global_batch_size):
    """`batch` = (x, y) from strategy.experimental_distribute_dataset. Run train_step on every replica
    and return the mean loss over the whole global batch as a scalar tensor."""
    x, y = batch
    per_replica_losses = strategy.run(train_step, args=(model, optimizer, x, y, global_batch_size))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

