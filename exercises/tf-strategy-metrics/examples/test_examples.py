"""Visible check: one pass on 2 replicas gives the accuracy over every example."""


def test_example_accuracy_over_both_replicas(probe):
    got = probe("epochs", ["A"])["results"][0]
    assert abs(got["accuracy"] - 6 / 11) < 1e-5, (
        f"evaluate on 11 examples (6 predicted right) returned accuracy {got['accuracy']}; expected 6/11 = 0.545455."
    )
