"""Visible check: train(strategy) returns the script's dict, and the reported accuracy is the model's."""


def test_example_reports_the_model_accuracy(probe):
    seen = probe("run")
    assert seen["error"] is None, f"train(strategy) raised {seen['error']}"
    assert seen.get("keys") == ["model", "train_loss", "val_accuracy"], f"train returned keys {seen.get('keys')}"
    assert seen["probe_val_accuracy"] is not None and abs(seen["val_accuracy"] - seen["probe_val_accuracy"]) < 1e-3, (
        f"train reported val_accuracy {seen['val_accuracy']}, the model scores {seen['probe_val_accuracy']}"
    )
