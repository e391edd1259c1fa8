import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()


def build(strategy):
    with strategy.scope():
        layer_stack = [tf.keras.Input(shape=(20,))]
        layer_stack.extend(tf.keras.layers.Dense(n, activation="relu") for n in [100, 50])
        layer_stack.append(tf.keras.layers.Dense(10))
        layer_stack.append(tf.keras.layers.Softmax())
        m = tf.keras.Sequential(layer_stack)
        m.compile(
            optimizer=tf.keras.optimizers.Adagrad(learning_rate=0.05),
            loss=tf.keras.losses.sparse_categorical_crossentropy,
            metrics=["sparse_categorical_accuracy"],
        )
    return m


model = build(strategy)
