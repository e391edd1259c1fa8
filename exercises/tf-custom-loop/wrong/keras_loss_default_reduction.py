import keras
import tensorflow as tf

# Keras 3 losses with the default reduction divide by the replica's batch AND by num_replicas_in_sync
# when called inside strategy.run, so with full batches under the strategy this equals sum / global batch size.
# Mistake: it never reads global_batch_size, so train_step alone with 4 examples of a global batch of 8
# returns the mean over 4.
loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def train_step(model, optimizer, x, y, global_batch_size):
    with tf.GradientTape() as tape:
        loss = loss_object(y, model(x, training=True))
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


@tf.function
def distributed_train_step(strategy, model, optimizer, batch, global_batch_size):
    per_replica = strategy.run(train_step, args=(model, optimizer, batch[0], batch[1], global_batch_size))
    return strategy.reduce("SUM", per_replica, axis=None)
