import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()

# Mistake: the model (and its weights) is created before entering the scope.
model = tf.keras.Sequential(
    [
        tf.keras.Input(shape=(20,)),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10, activation="softmax"),
    ]
)

with strategy.scope():
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
