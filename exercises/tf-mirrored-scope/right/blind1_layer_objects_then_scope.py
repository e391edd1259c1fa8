import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()

# Layer objects only; no weights until they are called on an input of known size.
hidden = tf.keras.layers.Dense(48, activation="tanh", name="hidden")
head = tf.keras.layers.Dense(10, name="head")
to_probs = tf.keras.layers.Activation("softmax", name="probs")

with strategy.scope():
    inp = tf.keras.Input(shape=(20,))
    out = to_probs(head(hidden(inp)))
    model = tf.keras.Model(inp, out)
    model.compile(
        optimizer=tf.keras.optimizers.Nadam(),
        loss="sparse_categorical_crossentropy",
    )
