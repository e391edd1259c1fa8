import tensorflow as tf

NUM_CLASSES = 3


def _per_example_cross_entropy(labels, logits):
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    return -tf.gather(log_probs, labels, axis=1, batch_dims=1)


def _metric_value(metric):
    value = float(metric.result())
    if value != value:
        raise ValueError(f"metric {metric.name} is NaN: was the dataset empty?")
    return value


def update_metrics(model, metrics, x, y):
    for key in ("accuracy", "loss"):
        if key not in metrics:
            raise KeyError(f"missing metric {key!r}")
    logits = model(x, training=False)
    labels = tf.cast(tf.reshape(y, [-1]), tf.int32)
    probs = tf.nn.softmax(logits, axis=-1)
    metrics["accuracy"].update_state(labels, probs)
    metrics["loss"].update_state(_per_example_cross_entropy(labels, logits))


def _replica_step(model, metrics, batch):
    x, y = batch
    update_metrics(model, metrics, x, y)


def evaluate(strategy, model, metrics, dist_dataset):
    for metric in (metrics["accuracy"], metrics["loss"]):
        metric.reset_state()

    step = tf.function(lambda batch: strategy.run(_replica_step, args=(model, metrics, batch)))
    for batch in dist_dataset:
        step(batch)

    return {"accuracy": _metric_value(metrics["accuracy"]), "loss": _metric_value(metrics["loss"])}
