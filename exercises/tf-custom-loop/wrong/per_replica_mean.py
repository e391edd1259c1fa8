import keras
import tensorflow as tf


def train_step(model, optimizer, x, y, global_batch_size):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        per_example = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        loss = tf.reduce_mean(per_example)  # Mistake: mean over this replica's examples only
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def distributed_train_step(strategy, model, optimizer, batch, global_batch_size):
    x, y = batch
    per_replica_losses = strategy.run(train_step, args=(model, optimizer, x, y, global_batch_size))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)
