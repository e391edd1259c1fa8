import keras
import tensorflow as tf

_PER_EXAMPLE_CE = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")


def update_metrics(model, metrics, x, y):
    logits = model(x, training=False)
    per_example_loss = _PER_EXAMPLE_CE(y, logits)
    metrics["loss"].update_state(per_example_loss)
    metrics["accuracy"].update_state(y, logits)


def evaluate(strategy, model, metrics, dist_dataset):
    names = ["accuracy", "loss"]
    for name in names:
        metrics[name].reset_state()

    @tf.function
    def run_pass(dataset):
        steps = tf.constant(0)
        for x, y in dataset:
            strategy.run(update_metrics, args=(model, metrics, x, y))
            steps += 1
        return steps

    steps = run_pass(dist_dataset)
    values = {name: float(metrics[name].result()) for name in names}
    print(f"evaluate: {int(steps)} steps on {strategy.num_replicas_in_sync} replicas -> {values}")
    return values
