"""The grading task's boundary: a message that is not a submission id is dropped, a database that stays away
gives the message back, and a short outage is waited out."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from celery.exceptions import Reject
from sqlalchemy.exc import OperationalError

from app.jobs import tasks
from tests.support import configure, free_port


@pytest.mark.parametrize("message", ["../../etc/passwd", 42, None, "A" * 32, "0" * 33, ["0" * 32]])
def test_a_message_that_is_not_a_submission_id_is_dropped(message: object, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasks, "grade_submission", lambda _id: pytest.fail("graded a malformed message"))
    assert tasks.grade_submission_task.run(message) is None


def test_a_database_that_stays_away_gives_the_message_back(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    closed = free_port()  # nothing listens: every connection is refused at once
    configure(
        monkeypatch, mode="dev", data_dir=str(tmp_path), database_url=f"postgresql://postgres@127.0.0.1:{closed}/x"
    )
    monkeypatch.setattr(tasks, "DB_GIVE_UP_S", 1.2)
    started = time.monotonic()
    with pytest.raises(Reject) as rejected:
        tasks.grade_submission_task.run("0" * 32)
    assert rejected.value.requeue is True and "database unreachable" in str(rejected.value.reason)
    assert 0.4 <= time.monotonic() - started < 5  # it waited with back-off before giving up


def test_a_short_outage_is_waited_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasks.time, "sleep", lambda _s: None)
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise OperationalError("SELECT 1", {}, Exception("server closed the connection unexpectedly"))
        return "stored"

    assert tasks.with_database_retry(flaky, what="record") == "stored"
    assert len(calls) == 3
