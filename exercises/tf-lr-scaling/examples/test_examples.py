"""Visible checks from the task's examples; the graded tests try more sizes, strategies, graph mode and fit."""

import math


def test_example_scaled_lr(probe):
    seen = probe("scaled", 0.1, 32, 32, "mirrored")
    assert seen.get("value") is not None and math.isclose(seen["value"], 0.2), (
        f"scaled_lr(0.1, 32, 32, MirroredStrategy() with 2 replicas) gave {seen}; expected 0.2"
    )


def test_example_warmup(probe):
    seen = probe("schedule_values", 0.4, 4, [0, 1, 2, 3, 4, 5])
    want = [0.1, 0.2, 0.3, 0.4, 0.4, 0.4]
    got = seen["eager"]
    assert isinstance(got, list) and all(math.isclose(g, w, rel_tol=1e-6) for g, w in zip(got, want, strict=False)), (
        f"WarmupSchedule(0.4, 4) at steps 0..5 gave {got}; expected {want}"
    )
