import keras
import tensorflow as tf

# reduction="sum": the loss object returns the SUM over this replica's examples; we divide ourselves.
_loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")


def train_step(model, optimizer, x, y, global_batch_size):
    """Run on ONE replica: compute this replica's loss, apply the gradients, return the loss.

    The loss is the sum of the per-example sparse categorical cross-entropies of `model(x)` (logits)
    divided by `global_batch_size`.
    """
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        loss = _loss_object(y, logits) / global_batch_size
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))

    # Logging only: how many examples were seen this step across all replicas.
    ctx = tf.distribute.get_replica_context()
    seen = ctx.all_reduce(tf.distribute.ReduceOp.SUM, tf.cast(tf.shape(x)[0], tf.float32))
    tf.print("replica", ctx.replica_id_in_sync_group, "share of loss:", loss, "examples in step:", seen)
    return loss


@tf.function
def distributed_train_step(strategy, model, optimizer, batch, global_batch_size):
    """`batch` = (x, y) from strategy.experimental_distribute_dataset. Run train_step on every replica
    and return the mean loss over the whole global batch as a scalar tensor."""
    features, labels = batch
    per_replica_losses = strategy.run(
        train_step, args=(model, optimizer, features, labels, global_batch_size)
    )
    return strategy.reduce("SUM", per_replica_losses, axis=None)
