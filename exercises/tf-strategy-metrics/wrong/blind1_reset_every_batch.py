import keras
import tensorflow as tf


def update_metrics(model, metrics, x, y):
    logits = model(x, training=False)
    per_example_loss = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
    metrics["accuracy"].update_state(y, logits)
    metrics["loss"].update_state(per_example_loss)


def evaluate(strategy, model, metrics, dist_dataset):
    @tf.function
    def step(x, y):
        strategy.run(update_metrics, args=(model, metrics, x, y))

    for x, y in dist_dataset:
        for metric in metrics.values():
            metric.reset_state()
        step(x, y)
    return {
        "accuracy": float(metrics["accuracy"].result()),
        "loss": float(metrics["loss"].result()),
    }
