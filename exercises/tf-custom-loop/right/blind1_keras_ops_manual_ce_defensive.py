import keras
import tensorflow as tf
from keras import ops

NUM_CLASSES = 3


def _per_example_xent(labels, logits):
    """Sparse categorical cross-entropy from logits, written out: -log_softmax(logits)[label]."""
    log_probs = ops.log_softmax(logits, axis=-1)
    one_hot = ops.one_hot(ops.cast(labels, "int32"), NUM_CLASSES, dtype=log_probs.dtype)
    return -ops.sum(one_hot * log_probs, axis=-1)


def train_step(model, optimizer, x, y, global_batch_size):
    """Run on ONE replica: compute this replica's loss, apply the gradients, return the loss.

    The loss is the sum of the per-example sparse categorical cross-entropies of `model(x)` (logits)
    divided by `global_batch_size`.
    """
    if global_batch_size <= 0:
        raise ValueError(f"global_batch_size must be positive, got {global_batch_size}")
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        tf.debugging.assert_rank(logits, 2, message="model must return (batch, classes) logits")
        per_example_losses = _per_example_xent(tf.reshape(y, [-1]), logits)
        loss = tf.math.divide(tf.reduce_sum(per_example_losses),
                              tf.constant(float(global_batch_size), dtype=per_example_losses.dtype))
    grads = tape.gradient(loss, model.trainable_variables)
    if any(g is None for g in grads):
        raise RuntimeError("some trainable variable got no gradient")
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def _step(strategy, model, optimizer, x, y, global_batch_size):
    per_replica = strategy.run(
        train_step,
        kwargs=dict(model=model, optimizer=optimizer, x=x, y=y, global_batch_size=global_batch_size),
    )
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)


def distributed_train_step(strategy, model, optimizer, batch, global_batch_size):
    """`batch` = (x, y) from strategy.experimental_distribute_dataset. Run train_step on every replica
    and return the mean loss over the whole global batch as a scalar tensor."""
    x, y = batch
    loss = _step(strategy, model, optimizer, x, y, global_batch_size)
    return tf.reshape(loss, [])
