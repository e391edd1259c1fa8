import keras
import tensorflow as tf  # noqa: F401 - tf.distribute and tf.keras


strategy = tf.distribute.MirroredStrategy()

with strategy.scope():
    model = keras.Sequential(
        [
            keras.Input(shape=(20,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10, activation="sigmoid"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
