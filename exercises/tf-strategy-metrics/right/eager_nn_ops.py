import tensorflow as tf


def update_metrics(model, metrics, x, y):
    logits = model(x, training=False)
    per_example = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
    metrics["loss"].update_state(per_example)
    metrics["accuracy"].update_state(y, logits)


def evaluate(strategy, model, metrics, dist_dataset):
    metrics["accuracy"].reset_state()
    metrics["loss"].reset_state()
    for x, y in dist_dataset:  # eager: strategy.run runs update_metrics on each replica in turn
        strategy.run(update_metrics, args=(model, metrics, x, y))
    return {"accuracy": metrics["accuracy"].result().numpy().item(), "loss": metrics["loss"].result().numpy().item()}
