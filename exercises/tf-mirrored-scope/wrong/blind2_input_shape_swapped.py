import keras
import tensorflow as tf  # noqa: F401 - tf.distribute and tf.keras


strategy = tf.distribute.MirroredStrategy()

NUM_FEATURES = 10
NUM_CLASSES = 10

with strategy.scope():
    model = keras.Sequential(
        [
            keras.Input(shape=(NUM_FEATURES,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(NUM_CLASSES, activation="softmax"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
