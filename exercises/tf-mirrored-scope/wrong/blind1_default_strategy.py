import tensorflow as tf

# picks up whatever strategy is available
strategy = tf.distribute.get_strategy()

with strategy.scope():
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(20,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
