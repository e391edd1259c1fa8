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
    """distribute_datasets_from_function for the input; accuracy and loss summed by hand across the replicas."""
    (x, y), (x_val, y_val) = make_data()
    global_batch = BATCH * strategy.num_replicas_in_sync

    with strategy.scope():
        model = build_model()
        optimizer = keras.optimizers.SGD(learning_rate=LR * strategy.num_replicas_in_sync)

    def dataset_fn(arrays):
        def make(context: tf.distribute.InputContext) -> tf.data.Dataset:
            data = tf.data.Dataset.from_tensor_slices(arrays)
            # One machine: a single input pipeline; every replica takes whole per-replica batches from it.
            data = data.shard(context.num_input_pipelines, context.input_pipeline_id)
            return data.batch(context.get_per_replica_batch_size(global_batch))

        return make

    train_data = strategy.distribute_datasets_from_function(dataset_fn((x, y)))
    val_data = strategy.distribute_datasets_from_function(dataset_fn((x_val, y_val)))

    @tf.function
    def train_step(x_batch, y_batch):
        def step(x_batch, y_batch):
            with tf.GradientTape() as tape:
                per_example = keras.losses.sparse_categorical_crossentropy(
                    y_batch, model(x_batch, training=True), from_logits=True)
                loss = tf.reduce_sum(per_example) / global_batch
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return tf.reduce_sum(per_example), tf.cast(tf.size(per_example), tf.float32)

        total, count = strategy.run(step, args=(x_batch, y_batch))
        return (strategy.reduce(tf.distribute.ReduceOp.SUM, total, axis=None),
                strategy.reduce(tf.distribute.ReduceOp.SUM, count, axis=None))

    @tf.function
    def correct_in(x_batch, y_batch):
        def count(x_batch, y_batch):
            predicted = tf.argmax(model(x_batch, training=False), axis=1, output_type=tf.int32)
            return tf.reduce_sum(tf.cast(predicted == y_batch, tf.float32)), tf.cast(tf.size(y_batch), tf.float32)

        right, seen = strategy.run(count, args=(x_batch, y_batch))
        return (strategy.reduce(tf.distribute.ReduceOp.SUM, right, axis=None),
                strategy.reduce(tf.distribute.ReduceOp.SUM, seen, axis=None))

    for _ in range(EPOCHS):
        loss_sum, examples = 0.0, 0.0
        for x_batch, y_batch in train_data:
            total, count = train_step(x_batch, y_batch)
            loss_sum, examples = loss_sum + float(total), examples + float(count)
    right, seen = 0.0, 0.0
    for x_batch, y_batch in val_data:
        r, n = correct_in(x_batch, y_batch)
        right, seen = right + float(r), seen + float(n)
    return {"model": model, "train_loss": loss_sum / examples, "val_accuracy": right / seen}
