"""What the harnesses share: the readiness rule, the bank a server grades, the warm counts of the beats."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from benchmarks.common import REPO, Served, copy_bank, worker_prewarmed

GRADING = "INFO:     app.jobs.prewarm: prewarmed 5 warm template kind(s), 2 of each\n"
LANE = "INFO:     app.jobs.prewarm: prewarmed 5 warm template kind(s), 1 of each\n"


def test_a_worker_is_ready_only_when_its_grading_pool_and_its_example_lane_prewarmed() -> None:
    assert not worker_prewarmed("gpulab worker: example runs of examples-cpu in a companion process\n")
    assert not worker_prewarmed(GRADING)
    assert worker_prewarmed(GRADING + "celery@host ready.\n" + LANE)


def test_a_server_grades_the_bank_as_shipped_or_only_the_named_exercises(tmp_path: Path) -> None:
    whole = copy_bank(tmp_path / "whole")
    shipped = {p.name for p in (REPO / "exercises").iterdir() if (p / "exercise.toml").exists()}
    assert {p.name for p in whole.iterdir() if (p / "exercise.toml").exists()} == shipped
    assert (whole / "path.toml").exists() and len(shipped) > 30
    three = copy_bank(tmp_path / "three", ["python-split-batch", "torch-dataparallel"])
    assert sorted(p.name for p in three.iterdir()) == ["python-split-batch", "torch-dataparallel"]


class _Beats(Served):
    """A served gpulab whose database is a SQLite file holding heartbeat rows."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path)


def test_warm_counts_sum_the_live_workers_hits_and_misses(tmp_path: Path) -> None:
    served = _Beats(tmp_path / "beats.db")
    with served.db() as db:
        db.execute("CREATE TABLE worker_heartbeats (name TEXT, warm JSON, stopped_at TEXT)")
        kinds = [{"kind": "torch", "hits": 40, "misses": {"first use": 1, "budget": 2}},
                 {"kind": "judge", "hits": 43, "misses": {}}]  # fmt: skip
        db.execute("INSERT INTO worker_heartbeats VALUES ('a', ?, NULL)", (json.dumps(kinds),))
        db.execute("INSERT INTO worker_heartbeats VALUES ('b', NULL, NULL)")  # beat before any warm pool
        db.execute("INSERT INTO worker_heartbeats VALUES ('c', ?, '2026-12-06')", (json.dumps(kinds),))  # stopped
    assert served.warm_counts() == {"hits": 83, "misses": 3}
