import tensorflow as tf


def build_model():
    model = tf.keras.Sequential(
        [
            tf.keras.layers.Dense(16, activation="relu", input_shape=(20,)),
            tf.keras.layers.Dense(10),
            tf.keras.layers.Softmax(),
        ]
    )
    model.compile(optimizer=tf.keras.optimizers.RMSprop(1e-3), loss="categorical_crossentropy")
    return model


strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = build_model()
