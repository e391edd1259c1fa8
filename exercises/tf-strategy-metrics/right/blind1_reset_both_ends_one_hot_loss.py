import keras
import tensorflow as tf


def update_metrics(model, metrics, x, y):
    logits = model(x)
    one_hot = tf.one_hot(tf.cast(y, tf.int32), depth=tf.shape(logits)[-1])
    per_example_loss = keras.losses.categorical_crossentropy(one_hot, logits, from_logits=True)
    metrics["accuracy"].update_state(y, logits)
    metrics["loss"].update_state(per_example_loss)


def _reset(metrics):
    for metric in metrics.values():
        metric.reset_state()


def evaluate(strategy, model, metrics, dist_dataset):
    _reset(metrics)

    @tf.function
    def distributed_step(inputs):
        strategy.run(update_metrics, args=(model, metrics, *inputs))

    for inputs in dist_dataset:
        distributed_step(inputs)

    result = {}
    for name in ("accuracy", "loss"):
        result[name] = metrics[name].result().numpy().item()
    _reset(metrics)
    return result
