import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()

with strategy.scope():
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(20,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(1, activation="softmax"),  # Mistake: one unit, not one per class
        ]
    )
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
