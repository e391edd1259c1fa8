import tensorflow as tf  # noqa: F401 - tf.distribute and tf.keras


def build_model(num_features=20, num_classes=10):
    """Returns an uncompiled model; call it inside strategy.scope()."""
    return tf.keras.Sequential(
        [
            tf.keras.layers.Dense(32, activation="relu", input_shape=(num_features,)),
            tf.keras.layers.Dense(num_classes, activation="softmax"),
        ]
    )


def compile_model(m):
    m.compile(
        optimizer=tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
        loss="categorical_crossentropy",
        metrics=["accuracy"],
    )
    return m


strategy = tf.distribute.MirroredStrategy()
with strategy.scope():
    model = compile_model(build_model())
