"""A burst of submissions on the embedded default (SQLite, in-process dispatcher), graded by the fake sandbox.

The ordering property, precisely: the in-process dispatcher takes submissions of one queue off a FIFO queue
with W worker threads, and a worker stamps ``started_at`` when it claims the row, a moment after taking it.
So two submissions taken at (nearly) the same time by two workers may stamp in either order, but a later
submission can only overtake an earlier one that is taken and not yet claimed, i.e. one of the at most W - 1
others in flight. Checked: for submissions i < j in ``created_at`` order (same queue), if j started before
i then j - i < W ("max start displacement" < W); with W = 1 the start order is exactly the submission order.
None is lost: every accepted submission ends ``graded`` with one attempt. Each fake grading takes
``GRADING_S``, so submissions queue up behind the workers as they do behind a real sandbox.

The HTTP test also covers the API timeout under load: before ``app.domain.platform.db`` let the SQLite pool grow,
requests
holding one of the 15 pooled connections waited for a threadpool thread that requests waiting for a
connection held, until the pool's 30 s timeout (a 500 or a client timeout).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select

from app.domain.accounts.passwords import create_user
from app.domain.exercises.bank import get_published, upsert_exercise
from app.domain.models import Role, Submission, SubmissionStatus, User
from app.domain.platform.db import session_scope
from app.domain.platform.migrate import upgrade
from app.domain.submissions.lifecycle import create_submission
from app.jobs.dispatch import InProcessDispatcher, get_dispatcher, reset_dispatcher
from app.main import create_app
from tests.support import BANK, bank_file, configure
from worker.bank.spec import load_exercise
from worker.core.outcome import Verdict
from worker.grading.sandbox.fake import FakeJob, FakeSandbox, Reply

SLUG = "python-split-batch"
EMAIL, PASSWORD = "burst@example.com", "correct horse battery staple"
GRADING_S = 0.1
pytestmark = pytest.mark.slow


def slow_pass(job: FakeJob) -> Reply:
    """Pass every test, after a while: long enough for a backlog to build, so the FIFO order matters."""
    time.sleep(GRADING_S)
    return job.reply()


@pytest.fixture
def embedded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_sandbox: FakeSandbox) -> int:
    """Migrate a fresh SQLite database, sync the exercise under test, and return a learner's id."""
    fake_sandbox.handler = slow_pass
    configure(monkeypatch, mode="dev", data_dir=str(tmp_path), grading_workers="2")
    upgrade()
    with session_scope() as session:
        # Only this exercise: others in the bank may be half-written by someone else right now.
        upsert_exercise(session=session, spec=load_exercise(BANK / SLUG))
        user = create_user(session=session, email=EMAIL, password=PASSWORD, role=Role.learner)
        session.flush()
        return user.id


def _rows(ids: list[str]) -> list[Submission]:
    """Return the submissions in ``created_at`` order (ties by insertion order of ``ids``)."""
    with session_scope() as session:
        rows = list(session.scalars(select(Submission).where(Submission.id.in_(ids))))
        session.expunge_all()
    position = {sid: i for i, sid in enumerate(ids)}
    return sorted(rows, key=lambda r: (r.created_at, position[r.id]))


def max_start_displacement(rows: list[Submission]) -> int:
    """The largest j - i over pairs i < j (submission order) where j started before i."""
    worst = 0
    for i, earlier in enumerate(rows):
        assert earlier.started_at is not None
        for j in range(i + 1, len(rows)):
            later_start = rows[j].started_at
            assert later_start is not None
            if later_start < earlier.started_at:
                worst = max(worst, j - i)
    return worst


def _assert_all_graded_in_order(rows: list[Submission], expected: int, workers: int) -> None:
    assert len(rows) == expected, "a submission was lost"
    assert {r.status for r in rows} == {SubmissionStatus.graded}
    assert {r.verdict for r in rows} == {Verdict.passed}
    assert {r.attempts for r in rows} == {1}, "a submission was graded twice or retried"
    assert max_start_displacement(rows) < workers


def test_burst_in_process_is_graded_in_order_and_none_lost(embedded: int) -> None:
    workers, count = 2, 40
    code = bank_file(SLUG, "solution.py")
    ids: list[str] = []
    dispatcher = InProcessDispatcher(workers=workers)
    try:
        for _ in range(count):  # accept and dispatch one by one, as the API does
            with session_scope() as session:
                user = session.get(User, embedded)
                exercise = get_published(session=session, slug=SLUG)
                submission = create_submission(
                    session=session, user=user, exercise=exercise, code=code, max_bytes=65536
                )
                ids.append(submission.id)
            dispatcher.dispatch(ids[-1], "cpu")
        assert dispatcher.wait_idle(timeout_s=600)
    finally:
        dispatcher.shutdown()
    _assert_all_graded_in_order(_rows(ids), count, workers)


def test_burst_through_http_api_with_concurrent_readers(embedded: int) -> None:
    """40 submissions, one after the other, while 100 readers hit the API: all answered, all graded, in order.

    The submissions go one at a time (each answered 202 before the next is sent) so "submission order" is
    defined: concurrent POSTs stamp ``created_at`` before they wait for SQLite's write lock, so their
    ``created_at`` order need not be the order in which they were committed and dispatched.
    """
    submissions, readers, workers = 40, 100, 2
    app = create_app()
    app.state.recover_on_start = False
    code = bank_file(SLUG, "solution.py")

    async def burst() -> tuple[list[httpx.Response], list[httpx.Response], float]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://gpulab.test", timeout=60) as client:
            (await client.post("/api/auth/login", json={"email": EMAIL, "password": PASSWORD})).raise_for_status()
            posting = True
            read: list[httpx.Response] = []
            slowest = 0.0

            async def reader(i: int) -> None:
                nonlocal slowest
                while posting or not read:
                    started = time.monotonic()
                    read.append(await client.get("/api/exercises" if i % 2 else f"/api/exercises/{SLUG}"))
                    slowest = max(slowest, time.monotonic() - started)

            async def poster() -> list[httpx.Response]:
                nonlocal posting
                answers = []
                try:
                    for _ in range(submissions):
                        answers.append(await client.post(f"/api/exercises/{SLUG}/submissions", json={"code": code}))
                finally:
                    posting = False
                return answers

            tasks = [asyncio.create_task(reader(i)) for i in range(readers)]
            posted = await poster()
            await asyncio.gather(*tasks)
            return posted, read, slowest

    try:
        posted, read, slowest = asyncio.run(burst())
        assert [r.status_code for r in posted] == [202] * submissions
        assert {r.status_code for r in read} == {200}
        # Generous for a loaded 2-core machine; the pool deadlock held requests for the pool timeout (30 s).
        assert slowest < 20, f"a request took {slowest:.1f} s with {readers} concurrent readers"
        dispatcher = get_dispatcher()
        assert isinstance(dispatcher, InProcessDispatcher)
        assert dispatcher.wait_idle(timeout_s=600)
    finally:
        reset_dispatcher()
    ids = [str(r.json()["id"]) for r in posted]
    _assert_all_graded_in_order(_rows(ids), submissions, workers)
