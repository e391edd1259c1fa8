import keras
import tensorflow as tf

# Mistake: the optimizer object (and its variables) is created before the scope.
optimizer = keras.optimizers.SGD(learning_rate=0.01)

strategy = tf.distribute.MirroredStrategy()

with strategy.scope():
    model = keras.Sequential(
        [
            keras.Input(shape=(20,)),
            keras.layers.Dense(64, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ]
    )
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
