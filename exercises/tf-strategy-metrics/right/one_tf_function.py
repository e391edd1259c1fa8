import keras
import tensorflow as tf


def update_metrics(model, metrics, x, y):
    logits = model(x, training=False)
    metrics["accuracy"].update_state(y, logits)
    metrics["loss"].update_state(keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))


def evaluate(strategy, model, metrics, dist_dataset):
    """Reset, run every batch in one tf.function over the whole dataset, read the results at the end."""
    accuracy, mean_loss = metrics["accuracy"], metrics["loss"]
    accuracy.reset_state()
    mean_loss.reset_state()

    @tf.function
    def run_all(dataset):
        for x, y in dataset:
            strategy.run(update_metrics, args=(model, metrics, x, y))

    run_all(dist_dataset)
    return {"accuracy": float(accuracy.result()), "loss": float(mean_loss.result())}
