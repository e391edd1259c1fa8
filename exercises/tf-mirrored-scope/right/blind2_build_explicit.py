import keras
import tensorflow as tf  # noqa: F401 - tf.distribute and tf.keras

strategy = tf.distribute.MirroredStrategy()

with strategy.scope():
    model = keras.Sequential(
        [
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dropout(0.1),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    # No Input layer: create the weights explicitly, still inside the scope.
    model.build((None, 20))
    model.compile(
        optimizer=keras.optimizers.Adam(),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=False),
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )

# Harmless checks/logging after the scope.
print(f"replicas={strategy.num_replicas_in_sync}, weight tensors={len(model.weights)}")
model.summary()
