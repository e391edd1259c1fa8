"""Visible check: train(strategy) returns the script's dict, and the reported accuracy is the model's."""

from runner import feedback


def test_example_reports_the_model_accuracy(probe):
    seen = probe("run")
    if seen["error"]:
        told = feedback.raised("train(strategy)", seen["error"]["type"], seen["error"]["message"])
        feedback.fail(told)
    if seen.get("keys") != ["model", "train_loss", "val_accuracy"]:
        feedback.fail(f"train returned {seen.get('returned')} with keys {seen.get('keys')}; return the script's dict, "
                      "{\"model\": model, \"train_loss\": ..., \"val_accuracy\": ...}.")
    got, want = seen["val_accuracy"], seen.get("probe_val_accuracy")
    if want is None or got is None or abs(got - want) >= 1e-3:
        feedback.fail(f"train reported val_accuracy {got}, but the returned model classifies {want} of the "
                      "validation examples correctly.")
