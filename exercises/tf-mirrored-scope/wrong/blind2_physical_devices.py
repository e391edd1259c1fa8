import keras
import tensorflow as tf  # noqa: F401 - tf.distribute and tf.keras


# use all available devices
all_devices = [d.name for d in tf.config.list_physical_devices()]
strategy = tf.distribute.MirroredStrategy(devices=all_devices)

with strategy.scope():
    model = keras.Sequential(
        [
            keras.Input(shape=(20,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
