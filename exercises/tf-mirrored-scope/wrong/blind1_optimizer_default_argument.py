import tensorflow as tf


def build_model(n_features=20, n_classes=10, optimizer=tf.keras.optimizers.Adam(learning_rate=1e-3)):  # noqa: B008 (the mistake)
    model = tf.keras.Sequential(
        [
            tf.keras.Input(shape=(n_features,)),
            tf.keras.layers.Dense(64, activation="relu"),
            tf.keras.layers.Dense(n_classes, activation="softmax"),
        ]
    )
    model.compile(
        optimizer=optimizer,
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
    )
    return model


strategy = tf.distribute.MirroredStrategy()
print(f"Replicas: {strategy.num_replicas_in_sync}")

with strategy.scope():
    model = build_model()
