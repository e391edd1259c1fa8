import keras
import tensorflow as tf


def update_metrics(model, metrics, x, y):
    """On ONE replica: add this replica's slice of the batch to the metrics."""
    logits = model(x, training=False)
    metrics["accuracy"].update_state(y, logits)
    # The metric averages what it is given: give it one loss per example, not a loss scaled for gradients.
    metrics["loss"].update_state(keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))


def evaluate(strategy, model, metrics, dist_dataset):
    """One pass over the distributed dataset; the metrics' values over exactly this pass."""
    for metric in metrics.values():
        metric.reset_state()  # start every pass from zero, or earlier passes are counted too

    @tf.function
    def step(batch):
        x, y = batch
        strategy.run(update_metrics, args=(model, metrics, x, y))

    for batch in dist_dataset:
        step(batch)
    # Read outside the replicas: result() then adds up every replica's totals and counts.
    return {name: float(metric.result()) for name, metric in metrics.items()}
