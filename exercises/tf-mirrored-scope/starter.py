import tensorflow as tf  # noqa: F401 - tf.distribute and tf.keras

# TODO: create a tf.distribute.MirroredStrategy called `strategy`, then, inside its scope, build a Keras
# model called `model` (20 input features -> 10 softmax class probabilities) and compile it with an
# optimizer and a classification loss.
strategy = None
model = None
