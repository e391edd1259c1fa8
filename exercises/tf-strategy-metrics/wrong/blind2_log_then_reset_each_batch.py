import keras
import tensorflow as tf


def update_metrics(model, metrics, x, y):
    """Run on ONE replica: update the accuracy and the per-example loss metrics with this replica's examples."""
    logits = model(x, training=False)
    metrics["accuracy"].update_state(y, logits)
    per_example_loss = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
    metrics["loss"].update_state(per_example_loss)


def evaluate(strategy, model, metrics, dist_dataset):
    """One pass over `dist_dataset`: run update_metrics on every replica for every batch."""
    for metric in metrics.values():
        metric.reset_state()

    @tf.function
    def eval_step(x, y):
        strategy.run(update_metrics, args=(model, metrics, x, y))

    for step, (x, y) in enumerate(dist_dataset):
        eval_step(x, y)
        # log this batch's metrics, then clear them for the next batch
        print(
            f"batch {step}: accuracy={float(metrics['accuracy'].result()):.4f} "
            f"loss={float(metrics['loss'].result()):.4f}"
        )
        for metric in metrics.values():
            metric.reset_state()

    return {
        "accuracy": float(metrics["accuracy"].result()),
        "loss": float(metrics["loss"].result()),
    }
