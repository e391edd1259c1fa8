import tensorflow as tf


def train_step(model, optimizer, x, y, global_batch_size):
    variables = model.trainable_variables
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
        loss = tf.reduce_sum(per_example) / tf.cast(global_batch_size, per_example.dtype)
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    return loss


def distributed_train_step(strategy, model, optimizer, batch, global_batch_size):
    features, labels = batch
    losses = strategy.run(train_step, kwargs={
        "model": model, "optimizer": optimizer, "x": features, "y": labels, "global_batch_size": global_batch_size,
    })
    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)
