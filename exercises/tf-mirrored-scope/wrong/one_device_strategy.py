import tensorflow as tf

# Mistake: a single-device strategy; nothing is mirrored.
strategy = tf.distribute.OneDeviceStrategy("/cpu:0")

with strategy.scope():
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(20,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
