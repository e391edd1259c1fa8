import keras


def update_metrics(model, metrics, x, y):
    logits = model(x, training=False)
    per_example_loss = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
    metrics["accuracy"].update_state(y, logits)
    metrics["loss"].update_state(per_example_loss)


def evaluate(strategy, model, metrics, dist_dataset):
    for metric in metrics.values():
        metric.reset_state()

    for x, y in dist_dataset:
        update_metrics(model, metrics, x, y)
    return {
        "accuracy": float(metrics["accuracy"].result()),
        "loss": float(metrics["loss"].result()),
    }
