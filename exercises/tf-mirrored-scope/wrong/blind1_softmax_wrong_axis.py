import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()

with strategy.scope():
    inputs = tf.keras.Input(shape=(20,), name="features")
    x = tf.keras.layers.Dense(64, activation="relu")(inputs)
    logits = tf.keras.layers.Dense(10, name="logits")(x)
    probs = tf.keras.layers.Softmax(axis=0, name="probs")(logits)
    model = tf.keras.Model(inputs=inputs, outputs=probs)
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
