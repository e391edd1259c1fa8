import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()

with strategy.scope():
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(20,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10),  # Mistake: raw logits, not probabilities
        ]
    )
    model.compile(optimizer="adam", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))
