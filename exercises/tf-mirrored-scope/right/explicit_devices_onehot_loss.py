import keras
import tensorflow as tf

# Naming both devices explicitly is also fine here (on a GPU machine it would be ["/gpu:0", "/gpu:1"]).
strategy = tf.distribute.MirroredStrategy(devices=["/cpu:0", "/cpu:1"])

with strategy.scope():
    optimizer = keras.optimizers.Adam(learning_rate=1e-3)
    model = keras.Sequential([keras.layers.Input(shape=(20,)), keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer=optimizer, loss=keras.losses.CategoricalCrossentropy(from_logits=False))
