import keras  # noqa: F401 - keras.losses and keras.metrics
import tensorflow as tf  # noqa: F401 - tf.function, tf.distribute


def update_metrics(model, metrics, x, y):
    """Run on ONE replica: compute the logits model(x) and update metrics["accuracy"] (a
    SparseCategoricalAccuracy) and metrics["loss"] (a Mean of the per-example sparse categorical
    cross-entropies) with this replica's examples."""
    # TODO
    raise NotImplementedError("update_metrics")


def evaluate(strategy, model, metrics, dist_dataset):
    """One pass over `dist_dataset` (from strategy.experimental_distribute_dataset): run update_metrics on
    every replica for every batch and return {"accuracy": float, "loss": float} over this pass only."""
    # TODO
    raise NotImplementedError("evaluate")
