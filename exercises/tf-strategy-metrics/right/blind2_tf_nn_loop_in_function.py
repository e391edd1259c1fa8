import keras  # noqa: F401
import tensorflow as tf


def update_metrics(model, metrics, x, y):
    """Run on ONE replica: per-example cross-entropies from tf.nn, accuracy from the logits."""
    logits = model(x, training=False)
    labels = tf.cast(tf.reshape(y, [-1]), tf.int32)
    metrics["accuracy"].update_state(labels, logits)
    per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    metrics["loss"].update_state(per_example)


def evaluate(strategy, model, metrics, dist_dataset):
    """The whole pass runs inside one tf.function; results are read afterwards, outside strategy.run."""
    for metric in metrics.values():
        metric.reset_state()

    @tf.function
    def run_pass(dataset):
        for x, y in dataset:
            strategy.run(update_metrics, args=(model, metrics, x, y))

    run_pass(dist_dataset)
    return {name: float(metrics[name].result()) for name in ("accuracy", "loss")}
