"""Visible check: a run killed in epoch 2 resumes at epoch 2."""


def test_example_resumes_at_epoch_2(probe):
    seen = probe("run", 4, 2, 1)
    assert seen["first"]["killed"], "the first run should be stopped by the probe's callback in epoch 2"
    assert seen["second"]["epochs"] == [2, 3], (
        f"after a kill in epoch 2 the second run went through the epochs {seen['second']['epochs']}; expected [2, 3]."
    )
