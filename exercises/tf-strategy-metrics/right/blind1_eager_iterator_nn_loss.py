import tensorflow as tf


def update_metrics(model, metrics, x, y):
    logits = model(x, training=False)
    labels = tf.cast(tf.reshape(y, [-1]), tf.int64)
    per_example_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
    metrics["accuracy"].update_state(labels, logits)
    metrics["loss"].update_state(per_example_loss)


def evaluate(strategy, model, metrics, dist_dataset):
    metrics["accuracy"].reset_state()
    metrics["loss"].reset_state()

    iterator = iter(dist_dataset)
    while True:
        try:
            x, y = next(iterator)
        except StopIteration:
            break
        strategy.run(update_metrics, args=(model, metrics, x, y))

    accuracy = metrics["accuracy"].result().numpy()
    loss = metrics["loss"].result().numpy()
    return {"accuracy": float(accuracy), "loss": float(loss)}
