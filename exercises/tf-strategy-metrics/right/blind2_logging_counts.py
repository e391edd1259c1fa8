import keras
import tensorflow as tf


def update_metrics(model, metrics, x, y):
    """Run on ONE replica; returns how many examples this replica saw (for logging only)."""
    logits = model(x, training=False)
    metrics["accuracy"].update_state(y, logits)
    per_example_loss = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
    metrics["loss"].update_state(per_example_loss)
    return tf.shape(x)[0]


def evaluate(strategy, model, metrics, dist_dataset):
    """One pass; also logs how many examples were seen in total (a SUM over replicas of plain counts)."""
    for metric in metrics.values():
        metric.reset_state()

    @tf.function
    def eval_step(x, y):
        counts = strategy.run(update_metrics, args=(model, metrics, x, y))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, counts, axis=None)

    seen = 0
    for x, y in dist_dataset:
        seen += int(eval_step(x, y))

    result = {
        "accuracy": float(metrics["accuracy"].result()),
        "loss": float(metrics["loss"].result()),
    }
    tf.print("evaluated", seen, "examples:", result)
    return result
