"""Submitting code, reading results, ownership, staff listing, request limits and the SSE status stream."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.models import Role, Submission, SubmissionStatus, TestResult, User
from app.domain.platform import news
from app.domain.submissions.lifecycle import create_submission
from app.web.routes import api_submissions
from tests.conftest import RecordingDispatcher, TinyExercise
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres

SUBMISSION_KEYS = {
    "id", "exercise", "exercise_version", "status", "verdict", "score", "max_score", "tests", "stdout", "stderr",
    "message", "created_at", "finished_at", "runtime_ms", "device", "hidden_tests", "newly_visible", "reveals_at",
    "assignment_id", "measurements", "params",
}  # fmt: skip
TEST_KEYS = {"name", "outcome", "message", "details", "points", "max_points", "visible"}


def _submit_row(
    session: Session, user: User, ex: TinyExercise, code: str = "def add(a, b):\n    return a + b\n"
) -> Submission:
    submission = create_submission(session=session, user=user, exercise=ex.exercise, code=code, max_bytes=65536)
    session.commit()
    return submission


def _grade(session: Session, submission: Submission, *, naive_times: bool = False) -> None:
    """Settle ``submission`` as a failed grade with two test results, as the worker would."""
    submission.status = SubmissionStatus.graded
    submission.verdict = Verdict.failed
    submission.score = 2.0
    submission.stdout, submission.stderr, submission.device = "out <b>", "err", "cpu (unsafe sandbox)"
    submission.runtime_ms = 1234
    finished = datetime(2030, 1, 2, 3, 4, 5)  # naive, as SQLite returns them: must be read as UTC
    submission.finished_at = finished
    submission.tests = [
        TestResult(position=0, name="test_add.py::test_small", outcome="passed", message="", points=2, max_points=2),
        TestResult(position=1, name="test_add.py::test_negative", outcome="failed", message="assert -3 == 1",
                   points=0, max_points=3),
    ]  # fmt: skip
    session.commit()


def test_submit_commits_then_dispatches_to_the_exercise_queue(
    learner_client: TestClient,
    make_exercise: Callable[..., TinyExercise],
    dispatcher: RecordingDispatcher,
    db_session: Session,
    learner: User,
) -> None:
    gpu = make_exercise(queue="gpu")
    response = learner_client.post(f"/api/exercises/{gpu.slug}/submissions", json={"code": "print('hi')\n"})
    assert response.status_code == 202
    body = response.json()
    assert body == {"id": body["id"], "status": "queued"}
    row = db_session.get(Submission, body["id"])
    assert row is not None and row.user_id == learner.id and row.code == "print('hi')\n"
    assert row.status is SubmissionStatus.queued and row.exercise_version_id == gpu.exercise.current_version_id
    assert dispatcher.calls == [(body["id"], "gpu")]


def test_dispatch_happens_only_after_the_row_is_committed(
    learner_client: TestClient, tiny_exercise: TinyExercise, dispatcher: RecordingDispatcher, db_session: Session
) -> None:
    seen: list[bool] = []

    def dispatch(submission_id: str, queue: str) -> None:
        # The request's session holds a transaction only until it commits.
        seen.append(db_session.in_transaction())
        dispatcher.calls.append((submission_id, queue))

    dispatcher.dispatch = dispatch  # type: ignore[method-assign]
    assert (
        learner_client.post(f"/api/exercises/{tiny_exercise.slug}/submissions", json={"code": "x"}).status_code == 202
    )
    assert seen == [False]


def test_a_failing_dispatcher_still_leaves_a_queued_submission(
    learner_client: TestClient, tiny_exercise: TinyExercise, dispatcher: RecordingDispatcher, db_session: Session
) -> None:
    def broken(submission_id: str, queue: str) -> None:
        raise ConnectionError("broker down")

    dispatcher.dispatch = broken  # type: ignore[method-assign]
    response = learner_client.post(f"/api/exercises/{tiny_exercise.slug}/submissions", json={"code": "x"})
    assert response.status_code == 202
    row = db_session.get(Submission, response.json()["id"])
    assert row is not None and row.status is SubmissionStatus.queued


def test_oversized_code_is_413_and_nothing_is_stored(
    learner_client: TestClient, tiny_exercise: TinyExercise, dispatcher: RecordingDispatcher, db_session: Session
) -> None:
    limit = learner_client.app.state.settings.max_code_bytes
    before = len(db_session.scalars(select(Submission.id)).all())
    response = learner_client.post(f"/api/exercises/{tiny_exercise.slug}/submissions", json={"code": "x" * (limit + 1)})
    assert response.status_code == 413
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json() == {
        "type": "https://gpulab.dev/problems/payload-too-large",
        "title": "Payload too large",
        "status": 413,
        "detail": f"Your code is {limit // 1024 + 1} KB; the limit is {limit // 1024} KB. Shorten it (remove long "
        "comments, pasted output or data) and submit again.",
        "instance": f"/api/exercises/{tiny_exercise.slug}/submissions",
    }
    assert dispatcher.calls == [] and len(db_session.scalars(select(Submission.id)).all()) == before
    at_limit = learner_client.post(f"/api/exercises/{tiny_exercise.slug}/submissions", json={"code": "x" * limit})
    assert at_limit.status_code == 202


def test_huge_body_is_refused_before_parsing(learner_client: TestClient, tiny_exercise: TinyExercise) -> None:
    url = f"/api/exercises/{tiny_exercise.slug}/submissions"
    huge = b'{"code": "' + b"x" * (50 * 1024 * 1024) + b'"}'
    response = learner_client.post(url, content=huge, headers={"Content-Type": "application/json"})
    assert response.status_code == 413
    limit_kb = learner_client.app.state.settings.max_code_bytes // 1024
    assert response.json()["detail"].startswith(f"Your code is over the limit of {limit_kb} KB. Shorten it")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the guard must count what it reads
        yield b'{"code": "'
        for _ in range(64):
            yield b"y" * (64 * 1024)
        yield b'"}'

    streamed = learner_client.post(url, content=chunks(), headers={"Content-Type": "application/json"})
    assert streamed.status_code == 413


def test_code_at_the_limit_passes_the_body_limit_however_it_is_escaped(
    learner_client: TestClient, tiny_exercise: TinyExercise
) -> None:
    # JSON writes each control character as six bytes: the body limit must still let the code limit decide.
    limit = learner_client.app.state.settings.max_code_bytes
    url = f"/api/exercises/{tiny_exercise.slug}/submissions"
    assert learner_client.post(url, json={"code": "\x01" * limit}).status_code == 202
    over = learner_client.post(url, json={"code": "\x01" * (limit + 1)})
    assert over.status_code == 413
    assert over.json()["detail"].startswith(f"Your code is {limit // 1024 + 1} KB; the limit is {limit // 1024} KB.")


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"code": "x"', "request body is not valid JSON"),
        (b"{}", "code: Field required"),
        (b'{"code": 123}', "code: Input should be a valid string"),
        (b'{"code": "x", "extra": 1}', "extra: Extra inputs are not permitted"),
        (b'["code"]', "Input should be a valid dictionary"),
    ],
)
def test_malformed_requests_get_a_readable_422(
    learner_client: TestClient, tiny_exercise: TinyExercise, content: bytes, expected: str
) -> None:
    response = learner_client.post(
        f"/api/exercises/{tiny_exercise.slug}/submissions",
        content=content,
        headers={"Content-Type": "application/json"},
    )
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert isinstance(detail, str) and detail.startswith("invalid request: ") and expected in detail, detail


def test_login_validation_error_names_the_field(client: TestClient) -> None:
    response = client.post("/api/auth/login", json={"email": "a@b.c", "password": "x" * 1025})
    assert response.status_code == 422
    assert "password: String should have at most 1024 characters" in response.json()["detail"]


def test_unauthenticated_submission_is_401(client: TestClient, tiny_exercise: TinyExercise) -> None:
    response = client.post(f"/api/exercises/{tiny_exercise.slug}/submissions", json={"code": "x"})
    assert response.status_code == 401


def test_submission_has_exactly_the_documented_shape(
    learner_client: TestClient, learner: User, tiny_exercise: TinyExercise, db_session: Session
) -> None:
    submission = _submit_row(db_session, learner, tiny_exercise)
    queued = learner_client.get(f"/api/submissions/{submission.id}").json()
    assert set(queued) == SUBMISSION_KEYS
    assert queued["status"] == "queued" and queued["verdict"] is None and queued["score"] is None
    assert queued["tests"] == [] and queued["finished_at"] is None
    assert queued["created_at"].endswith(("Z", "+00:00"))

    _grade(db_session, submission)
    body = learner_client.get(f"/api/submissions/{submission.id}").json()
    assert set(body) == SUBMISSION_KEYS
    assert body["id"] == submission.id
    assert body["exercise"] == tiny_exercise.slug and body["exercise_version"] == 1
    assert body["status"] == "graded" and body["verdict"] == "failed"
    assert body["score"] == 2.0 and body["max_score"] == 5.0
    assert [set(t) for t in body["tests"]] == [TEST_KEYS, TEST_KEYS]
    assert body["tests"][1] == {
        "name": "test_add.py::test_negative", "outcome": "failed", "message": "assert -3 == 1", "details": "",
        "points": 0.0, "max_points": 3.0, "visible": True,
    }  # fmt: skip
    assert body["stdout"] == "out <b>" and body["stderr"] == "err" and body["device"] == "cpu (unsafe sandbox)"
    assert body["runtime_ms"] == 1234 and body["message"] == ""
    assert datetime.fromisoformat(body["finished_at"].replace("Z", "+00:00")).isoformat() == "2030-01-02T03:04:05+00:00"


def test_learners_see_only_their_own_submissions(
    client: TestClient,
    login: Callable[..., None],
    learner: User,
    other_learner: User,
    instructor: User,
    tiny_exercise: TinyExercise,
    db_session: Session,
) -> None:
    mine = _submit_row(db_session, learner, tiny_exercise)
    theirs = _submit_row(db_session, other_learner, tiny_exercise)
    login(client, learner)
    assert client.get(f"/api/submissions/{mine.id}").status_code == 200
    hidden = client.get(f"/api/submissions/{theirs.id}")
    assert hidden.status_code == 404 and hidden.json()["detail"] == f"no submission {theirs.id!r}"
    assert client.get(f"/api/submissions/{theirs.id}/events").status_code == 404
    assert client.get("/api/submissions/does-not-exist").status_code == 404
    listed = client.get("/api/me/submissions").json()
    assert [s["id"] for s in listed] == [mine.id]

    login(client, instructor)  # staff may open anyone's submission
    assert client.get(f"/api/submissions/{theirs.id}").status_code == 200


def test_my_submissions_are_newest_first(
    learner_client: TestClient, tiny_exercise: TinyExercise, db_session: Session, learner: User
) -> None:
    ids = [_submit_row(db_session, learner, tiny_exercise).id for _ in range(3)]
    assert [s["id"] for s in learner_client.get("/api/me/submissions").json()] == ids[::-1]


def test_exercise_submissions_are_for_staff_only(
    client: TestClient,
    login: Callable[..., None],
    learner: User,
    instructor: User,
    other_learner: User,
    make_user: Callable[..., User],
    tiny_exercise: TinyExercise,
    db_session: Session,
) -> None:
    first = _submit_row(db_session, learner, tiny_exercise)
    second = _submit_row(db_session, other_learner, tiny_exercise)
    url = f"/api/instructor/exercises/{tiny_exercise.slug}/submissions"

    login(client, learner)
    refused = client.get(url)
    assert refused.status_code == 403 and "instructor or admin role" in refused.json()["detail"]

    login(client, make_user(Role.instructor))  # no course role: practice work is the practice course's staff's
    assert client.get(url).json() == []
    for staff in (instructor, make_user(Role.admin)):  # on the practice course's staff list; an admin
        login(client, staff)
        response = client.get(url)
        assert response.status_code == 200
        rows = response.json()
        assert [r["id"] for r in rows] == [second.id, first.id]
        assert [r["user"] for r in rows] == [other_learner.email, learner.email]
        assert set(rows[0]) == SUBMISSION_KEYS | {"user"}


def _events(lines: Iterator[str]) -> Iterator[tuple[str, str]]:
    """Parse an SSE line stream into (kind, payload): ("status", json) events and ("comment", text)."""
    event, data = "", []
    for line in lines:
        if line.startswith(":"):
            yield "comment", line[1:].strip()
        elif line.startswith("event:"):
            event = line.split(":", 1)[1].strip()
        elif line.startswith("data:"):
            data.append(line.split(":", 1)[1].strip())
        elif line == "" and data:
            yield event, "\n".join(data)
            event, data = "", []


def test_events_of_a_graded_submission_is_a_single_event(
    learner_client: TestClient, learner: User, tiny_exercise: TinyExercise, db_session: Session
) -> None:
    submission = _submit_row(db_session, learner, tiny_exercise)
    _grade(db_session, submission)
    with learner_client.stream("GET", f"/api/submissions/{submission.id}/events") as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        assert stream.headers["cache-control"] == "no-cache, no-transform"  # no proxy may buffer or compress it
        assert stream.headers["x-accel-buffering"] == "no"
        events = list(_events(stream.iter_lines()))  # ends on its own: the stream closes after "graded"
    assert len(events) == 1 and events[0][0] == "status"
    data = json.loads(events[0][1])
    assert set(data) == SUBMISSION_KEYS and data["status"] == "graded" and data["verdict"] == "failed"


def test_events_follow_the_submission_until_it_is_graded(
    learner_client: TestClient,
    learner: User,
    tiny_exercise: TinyExercise,
    db_session: Session,
    db_lock: threading.RLock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(learner_client.app.state.settings, "events_poll_s", 0.05)
    monkeypatch.setattr(api_submissions, "KEEPALIVE_S", 0.2)
    submission = _submit_row(db_session, learner, tiny_exercise)
    seen: list[tuple[str, str]] = []
    with learner_client.stream("GET", f"/api/submissions/{submission.id}/events") as stream:
        events = _events(stream.iter_lines())
        seen.append(next(events))
        assert json.loads(seen[-1][1])["status"] == "queued"

        seen.append(next(events))  # nothing changes for a while: a keep-alive comment
        assert seen[-1] == ("comment", "keep-alive")

        with db_lock:  # the app polls this same session from its own thread
            submission.status = SubmissionStatus.running
            db_session.commit()
        _kind, payload = next(e for e in events if e[0] == "status")
        assert json.loads(payload)["status"] == "running"

        with db_lock:
            _grade(db_session, submission)
        _kind, payload = next(e for e in events if e[0] == "status")
        final = json.loads(payload)
        assert final["status"] == "graded" and final["verdict"] == "failed" and len(final["tests"]) == 2
        assert all(kind == "comment" for kind, _ in events)  # and then the stream ends


def test_events_wake_on_news_without_waiting_for_the_poll(
    learner_client: TestClient,
    learner: User,
    tiny_exercise: TinyExercise,
    db_session: Session,
    db_lock: threading.RLock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(learner_client.app.state.settings, "events_poll_s", 30.0)  # only the news can deliver in time
    submission = _submit_row(db_session, learner, tiny_exercise)
    with learner_client.stream("GET", f"/api/submissions/{submission.id}/events") as stream:
        events = _events(stream.iter_lines())
        assert json.loads(next(events)[1])["status"] == "queued"
        with db_lock:
            _grade(db_session, submission)
        started = time.monotonic()
        news.publish(submission.id)  # what the grading task does after its commit
        _kind, payload = next(e for e in events if e[0] == "status")
        waited_s = time.monotonic() - started
    assert json.loads(payload)["status"] == "graded"
    assert waited_s < 10.0, f"the stream waited {waited_s:.1f} s: it slept through the news"


def test_events_end_with_a_closing_comment_when_the_server_stops(
    learner_client: TestClient,
    learner: User,
    tiny_exercise: TinyExercise,
    db_session: Session,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(learner_client.app.state.settings, "events_poll_s", 0.05)
    submission = _submit_row(db_session, learner, tiny_exercise)
    try:
        with learner_client.stream("GET", f"/api/submissions/{submission.id}/events") as stream:
            events = _events(stream.iter_lines())
            assert json.loads(next(events)[1])["status"] == "queued"
            news.begin_shutdown()  # what SIGTERM does
            rest = list(events)  # and then the stream ends
    finally:
        news.end_shutdown()
    assert rest == [("comment", "server stopping; reconnect")]


def test_events_stop_after_the_time_cap(
    learner_client: TestClient,
    learner: User,
    tiny_exercise: TinyExercise,
    db_session: Session,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(learner_client.app.state.settings, "events_poll_s", 0.05)
    monkeypatch.setattr(api_submissions, "MAX_STREAM_S", 0.3)
    submission = _submit_row(db_session, learner, tiny_exercise)
    with learner_client.stream("GET", f"/api/submissions/{submission.id}/events") as stream:
        statuses = [json.loads(p)["status"] for k, p in _events(stream.iter_lines()) if k == "status"]
    assert statuses == ["queued"]
