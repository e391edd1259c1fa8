"""The TensorFlow floor harness: each step is timed in a fresh process, and the floor is the job's steps' sum."""

from __future__ import annotations

import pytest

from benchmarks.tf_floor import JOB_STEPS, measure

pytestmark = pytest.mark.slow


def test_one_run_times_every_step_and_sums_the_jobs_part() -> None:
    result = measure(1)
    steps = result["steps"]
    assert list(steps) == ["import_and_split", *JOB_STEPS, "second_fit"]
    assert all(s["p50_s"] > 0 for s in steps.values())
    assert result["job_floor_p50_s"] == pytest.approx(sum(steps[name]["p50_s"] for name in JOB_STEPS))
