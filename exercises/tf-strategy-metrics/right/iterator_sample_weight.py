import keras
import tensorflow as tf


def update_metrics(model, metrics, x, y):
    logits = model(x, training=False)
    losses = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)(y, logits)
    # An explicit weight of 1 per example: the same average, counted example by example.
    metrics["loss"].update_state(losses, sample_weight=tf.ones_like(losses))
    metrics["accuracy"].update_state(y, tf.nn.softmax(logits))


def evaluate(strategy, model, metrics, dist_dataset):
    for metric in metrics.values():
        metric.reset_state()
    iterator = iter(dist_dataset)

    @tf.function
    def step(iterator):
        x, y = next(iterator)
        strategy.run(update_metrics, kwargs={"model": model, "metrics": metrics, "x": x, "y": y})

    while True:
        try:
            step(iterator)
        except (StopIteration, tf.errors.OutOfRangeError):
            break
    return {name: float(metric.result()) for name, metric in sorted(metrics.items())}
