"""Visible examples: the prompt's numbers. The hidden tests try more sizes, bad input and two param groups."""

import math


def test_example_scaled_lr(submission):
    got = submission.scaled_lr(0.1, 256, 64, 8)  # global batch 512 = 2 x 256
    assert math.isclose(got, 0.2), f"scaled_lr(0.1, 256, 64, 8) returned {got!r}, expected 0.2"


def test_example_warmup(submission):
    got = [submission.warmup_lr(step, 0.4, 4) for step in range(6)]
    want = [0.1, 0.2, 0.3, 0.4, 0.4, 0.4]
    ok = all(math.isclose(g, w) for g, w in zip(got, want, strict=True))
    assert ok, f"warmup_lr(0..5, 0.4, 4) gave {got}, expected {want}"


def test_example_set_lr(probe):
    seen = probe("set_lr_groups", 0.25)
    assert seen["lrs"] == [0.25, 0.25], f"param group learning rates after set_lr: {seen['lrs']}"
