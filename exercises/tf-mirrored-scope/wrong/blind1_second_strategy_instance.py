import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()
print("Number of replicas:", strategy.num_replicas_in_sync)


def build_and_compile():
    with tf.distribute.MirroredStrategy().scope():
        model = tf.keras.Sequential(
            [
                tf.keras.Input(shape=(20,)),
                tf.keras.layers.Dense(64, activation="relu"),
                tf.keras.layers.Dense(10, activation="softmax"),
            ]
        )
        model.compile(
            optimizer=tf.keras.optimizers.Adam(),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
        )
    return model


model = build_and_compile()
