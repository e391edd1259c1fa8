"""The harnesses' shared readiness rule: a worker is measured only once both of its processes prewarmed."""

from __future__ import annotations

from benchmarks.common import worker_prewarmed

GRADING = "INFO:     app.jobs.prewarm: prewarmed 5 warm template kind(s), 2 of each\n"
LANE = "INFO:     app.jobs.prewarm: prewarmed 5 warm template kind(s), 1 of each\n"


def test_a_worker_is_ready_only_when_its_grading_pool_and_its_example_lane_prewarmed() -> None:
    assert not worker_prewarmed("gpulab worker: example runs of examples-cpu in a companion process\n")
    assert not worker_prewarmed(GRADING)
    assert worker_prewarmed(GRADING + "celery@host ready.\n" + LANE)
