"""Visible checks: run them before you submit. The graded tests look at more (see the task)."""


def test_strategy_has_two_replicas(probe):
    seen = probe("observe")
    assert seen["strategy_type"] == "MirroredStrategy" and seen["replicas"] == 2, (
        f"`strategy` is a {seen['strategy_type']} with {seen['replicas']} replica(s); expected a "
        "tf.distribute.MirroredStrategy with 2 replicas on this grader."
    )


def test_output_shape(probe):
    seen = probe("observe")
    assert seen.get("output_shape") == [64, 10], (
        f"model(x) on a (64, 20) batch gave shape {seen.get('output_shape')} "
        f"({seen.get('output_error')}); expected (64, 10)."
    )
