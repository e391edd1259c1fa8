import keras
import tensorflow as tf


def train_step(model, optimizer, x, y, global_batch_size):
    with tf.GradientTape() as tape:
        logits = model(x, training=True)
        per_example = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch_size)
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


def distributed_train_step(strategy, model, optimizer, batch, global_batch_size):
    x, y = batch
    # Mistake: no strategy.run; x and y are PerReplica values here.
    loss = train_step(model, optimizer, x, y, global_batch_size)
    return strategy.reduce(tf.distribute.ReduceOp.SUM, loss, axis=None)
