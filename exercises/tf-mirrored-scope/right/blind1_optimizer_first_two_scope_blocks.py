import tensorflow as tf

strategy = tf.distribute.MirroredStrategy()

# everything that owns variables is created under the strategy
with strategy.scope():
    opt = tf.keras.optimizers.Adam(learning_rate=1e-3)

    model = tf.keras.Sequential(name="clf")
    for width in (64, 64):
        model.add(tf.keras.layers.Dense(width, activation="relu"))
    model.add(tf.keras.layers.Dense(10, activation="softmax"))
    model.build(input_shape=(None, 20))

with strategy.scope():
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
