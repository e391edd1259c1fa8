"""Faults on the real deployment: PostgreSQL, Redis, Celery workers and the API, with default settings.

Each test breaks one part while gradings are queued or running, then checks that every accepted submission
settles with its right verdict, exactly once (an audit trigger records every settling), within 60 s of the
fault clearing. The times are printed (run with ``-s``) and recorded in the closing notes and the README.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import httpx
import pytest
from sqlalchemy import func, select

from app.domain.accounts.passwords import create_user
from app.domain.exercises.bank import get_published
from app.domain.models import Role, Submission, SubmissionStatus, User, WorkerBeat
from app.domain.platform.db import session_scope
from app.domain.submissions.lifecycle import create_submission
from app.jobs.dispatch import CeleryDispatcher
from app.settings import get_settings
from tests.faults.conftest import Deployment, kill_group, settle_time
from tests.support import bank_file, wait_for

SLUG = "python-split-batch"
SETTLE_LIMIT_S = 60
PASSWORD = "a long passphrase for faults"
pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


def slow(seconds: float) -> str:
    """A correct solution that takes ``seconds`` to import: gradings stay running long enough to break things."""
    return bank_file(SLUG, "solution.py") + f"\nimport time as _t\n_t.sleep({seconds})\n"


def wrong() -> str:
    return bank_file(SLUG, "wrong/round_robin.py")


def submit(codes: list[str], *, dispatch: bool = True) -> list[str]:
    """Store submissions as the API does (committed first), then send them to the queue."""
    ids = []
    with session_scope() as session:
        exercise = get_published(session=session, slug=SLUG)
        for code in codes:
            ids.append(create_submission(session=session, user=None, exercise=exercise, code=code, max_bytes=65536).id)
    if dispatch:
        dispatcher = CeleryDispatcher(get_settings())
        try:
            for submission_id in ids:
                dispatcher.dispatch(submission_id, "cpu")
        finally:
            dispatcher.shutdown()
    return ids


def count(status: SubmissionStatus) -> int:
    with session_scope() as session:
        return int(session.scalar(select(func.count()).where(Submission.status == status)) or 0)


def all_settled(ids: list[str]) -> dict[str, Submission] | None:
    with session_scope() as session:
        rows = {row.id: row for row in session.scalars(select(Submission).where(Submission.id.in_(ids)))}
        if any(row.status not in (SubmissionStatus.graded, SubmissionStatus.error) for row in rows.values()):
            return None
        session.expunge_all()
        return rows


def assert_settled_once(deployment: Deployment, expected: dict[str, str], since: float, fault: str) -> float:
    """Wait until every id settled; check verdicts and the audit; return the seconds since ``since``."""
    rows = wait_for(lambda: all_settled(list(expected)), timeout_s=SETTLE_LIMIT_S + 30, interval_s=0.25)
    took = settle_time(since)
    assert isinstance(rows, dict)
    got = {sid: (row.verdict.value if row.verdict else None) for sid, row in rows.items()}
    assert got == expected, {sid: rows[sid].message for sid in rows}
    audit = deployment.audit()
    settled_ids = [sid for sid, _status, _verdict in audit]
    assert sorted(settled_ids) == sorted(expected), "a submission settled twice, or never"
    print(f"\nfault {fault}: all {len(expected)} settled {took} s after the fault cleared")
    for row in sorted(rows.values(), key=lambda r: r.created_at):
        assert row.finished_at is not None
        print(
            f"  {row.id[:8]} queued→start {(row.started_at or row.finished_at) - row.created_at}"
            f" →end {row.finished_at - row.created_at} attempts {row.attempts} {row.message[:60]!r}"
        )
    assert took <= SETTLE_LIMIT_S, f"{fault}: took {took} s"
    return took


def wait_until(predicate: Callable[[], bool], timeout_s: float = 60) -> None:
    wait_for(predicate, timeout_s=timeout_s, interval_s=0.1)


def test_worker_sigkilled_mid_grade(deployment: Deployment) -> None:
    doomed = deployment.start_worker("doomed")
    ids = submit([slow(6)] * 3)
    expected = dict.fromkeys(ids, "passed")
    wait_until(lambda: count(SubmissionStatus.running) >= 2)  # the only worker (2 slots) holds two gradings
    deployment.start_worker("survivor")  # the replacement (another node, or the same one restarted)
    kill_group(doomed)  # an OOM kill or a lost node: no warm shutdown, nothing handed back
    killed_at = time.monotonic()
    assert_settled_once(deployment, expected, killed_at, "worker SIGKILL mid-grade")
    with session_scope() as session:
        attempts = sorted(session.scalars(select(Submission.attempts).where(Submission.id.in_(ids))))
    assert attempts[-1] == 2  # the interrupted ones were graded again, once; none charged more


def test_worker_sigterm_finishes_what_it_holds_and_hands_back_the_rest(deployment: Deployment) -> None:
    leaving = deployment.start_worker("leaving")
    ids = submit([slow(5)] * 2 + [wrong()] * 3)
    expected = dict(zip(ids, ["passed"] * 2 + ["failed"] * 3, strict=True))
    wait_until(lambda: count(SubmissionStatus.running) >= 2)
    kill_group(leaving, signal.SIGTERM)  # a rolling update: warm shutdown
    leaving.wait(timeout=60)
    assert leaving.returncode == 0
    with session_scope() as session:
        held = {row.id: row for row in session.scalars(select(Submission).where(Submission.id.in_(ids[:2])))}
        assert all(row.status is SubmissionStatus.graded and row.attempts == 1 for row in held.values())
        beat = session.scalar(select(WorkerBeat).where(WorkerBeat.pid == leaving.pid))
        assert beat is not None and beat.stopped_at is not None  # an orderly exit, not a dead worker
    stopped_at = time.monotonic()
    deployment.start_worker("next")
    took = assert_settled_once(deployment, expected, stopped_at, "worker SIGTERM (graceful)")
    assert took < 30  # handed back at once: nothing waited for a lease or the sweeper's staleness


def test_redis_restarted_with_its_append_only_file(deployment: Deployment) -> None:
    deployment.start_worker("w1")
    ids = submit([slow(3)] * 2 + [wrong()] * 4)
    expected = dict(zip(ids, ["passed"] * 2 + ["failed"] * 4, strict=True))
    wait_until(lambda: count(SubmissionStatus.running) >= 1)
    deployment.stack.redis.restart(keep_data=True)
    back_at = time.monotonic()
    assert_settled_once(deployment, expected, back_at, "Redis restarted (AOF)")


def test_redis_lost_its_queue(deployment: Deployment) -> None:
    deployment.start_worker("w1")
    ids = submit([slow(3)] * 2 + [wrong()] * 4)
    expected = dict(zip(ids, ["passed"] * 2 + ["failed"] * 4, strict=True))
    wait_until(lambda: count(SubmissionStatus.running) >= 2)
    assert count(SubmissionStatus.queued) >= 3  # still waiting in Redis: about to be lost
    deployment.stack.redis.restart(keep_data=False)  # a lagging replica promoted, a FLUSHALL, a lost disk
    assert deployment.stack.redis.client().llen("cpu") == 0
    back_at = time.monotonic()
    assert_settled_once(deployment, expected, back_at, "Redis lost its queue")


def test_broker_down_at_submit_time_leaves_it_queued_and_it_is_sent_later(deployment: Deployment) -> None:
    with session_scope() as session:
        create_user(session=session, email="ray@example.com", password=PASSWORD, role=Role.learner)
    deployment.start_worker("w1")
    _api, base = deployment.start_api()
    client = httpx.Client(base_url=base, timeout=30)
    assert client.post("/api/auth/login", json={"email": "ray@example.com", "password": PASSWORD}).status_code == 200
    deployment.stack.redis.kill()
    asked = time.monotonic()
    response = client.post(f"/api/exercises/{SLUG}/submissions", json={"code": wrong()})
    assert time.monotonic() - asked < 5, "a broker that is down must not hold the learner's request"
    assert response.status_code == 202 and response.json()["status"] == "queued", response.text
    submission_id = response.json()["id"]
    assert client.get(f"/api/submissions/{submission_id}").json()["status"] == "queued"  # what the learner sees
    deployment.stack.redis.start()
    back_at = time.monotonic()
    assert_settled_once(deployment, {submission_id: "failed"}, back_at, "broker down at submit")


def test_postgres_restarted_while_gradings_run(deployment: Deployment) -> None:
    deployment.start_worker("w1")
    ids = submit([slow(4)] * 2 + [wrong()] * 3)
    expected = dict(zip(ids, ["passed"] * 2 + ["failed"] * 3, strict=True))
    wait_until(lambda: count(SubmissionStatus.running) >= 2)
    deployment.stack.postgres.stop("fast")  # drops every connection, as a restart or fail-over does
    time.sleep(3)  # the gradings finish while the database is away
    deployment.stack.postgres.start()
    back_at = time.monotonic()
    assert_settled_once(deployment, expected, back_at, "PostgreSQL restarted")


def test_api_sigkilled_after_accepting(deployment: Deployment) -> None:
    with session_scope() as session:
        create_user(session=session, email="lin@example.com", password=PASSWORD, role=Role.learner)
    deployment.start_worker("w1")
    api, base = deployment.start_api()
    client = httpx.Client(base_url=base, timeout=30)
    assert client.post("/api/auth/login", json={"email": "lin@example.com", "password": PASSWORD}).status_code == 200
    codes = [slow(2), wrong(), wrong()]
    ids = []
    for code in codes:
        response = client.post(f"/api/exercises/{SLUG}/submissions", json={"code": code})
        assert response.status_code == 202, response.text
        ids.append(response.json()["id"])
    kill_group(api)  # the API dies right after accepting: the work must not depend on it
    killed_at = time.monotonic()
    assert_settled_once(deployment, dict(zip(ids, ["passed", "failed", "failed"], strict=True)), killed_at,
                        "API SIGKILL")  # fmt: skip
    _api, base = deployment.start_api("api-restarted")  # and the learner sees them after it comes back
    client = httpx.Client(base_url=base, timeout=30)
    assert client.post("/api/auth/login", json={"email": "lin@example.com", "password": PASSWORD}).status_code == 200
    assert client.get(f"/api/submissions/{ids[0]}").json()["verdict"] == "passed"
    with session_scope() as session:
        assert session.scalar(select(func.count()).select_from(User)) == 1


def test_api_sigterm_ends_live_streams_cleanly_and_exits(deployment: Deployment) -> None:
    with session_scope() as session:
        create_user(session=session, email="mo@example.com", password=PASSWORD, role=Role.learner)
    api, base = deployment.start_api()  # no worker: the submission stays queued and its stream stays open
    client = httpx.Client(base_url=base, timeout=30)
    assert client.post("/api/auth/login", json={"email": "mo@example.com", "password": PASSWORD}).status_code == 200
    submission_id = client.post(f"/api/exercises/{SLUG}/submissions", json={"code": wrong()}).json()["id"]
    lines: list[str] = []
    with client.stream("GET", f"/api/submissions/{submission_id}/events") as stream:
        chunks = stream.iter_lines()
        while not any(line.startswith("data:") for line in lines):
            lines.append(next(chunks))
        api.send_signal(signal.SIGTERM)  # a rolling restart of the API
        stopped_at = time.monotonic()
        lines.extend(chunks)  # the server ends the stream: iteration stops instead of hanging
    ended_s = time.monotonic() - stopped_at
    assert any("server stopping" in line for line in lines), lines
    assert ended_s < 5, f"the stream stayed open {ended_s:.1f} s after SIGTERM"
    api.wait(timeout=15)  # and the process exits instead of waiting for the stream's 15 minutes
    assert api.returncode in (0, -signal.SIGTERM), api.returncode
    with session_scope() as session:
        row = session.get(Submission, submission_id)
        assert row is not None and row.status is SubmissionStatus.queued  # nothing lost: a worker grades it later
