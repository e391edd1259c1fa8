"""``POST /api/exercises/{slug}/runs``: the visible example tests, graded right away, unstored and rate-limited.

Gradings go to the ``fake_sandbox``; the example tests in a real sandbox are ``tests/exercises`` and
``tests/worker/test_example_jobs.py``.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.exercises.example_runs import RunGate
from app.domain.models import Exercise, Submission
from tests.conftest import TinyExercise, tiny_files
from worker.bank.spec import ExerciseSpec
from worker.core.errors import RateLimited
from worker.grading.examples import examples_files
from worker.grading.sandbox.fake import FakeJob, FakeSandbox, Reply

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres

EXAMPLE_TEST = """
def test_add_small(submission):
    got = submission.add(1, 2)
    assert got == 3, f"add(1, 2) returned {got!r}; expected 3 <EXAMPLE-FEEDBACK>"
"""
FEEDBACK = "add(1, 2) returned -1; expected 3 <EXAMPLE-FEEDBACK>"


def subtraction_fails_with_feedback(job: FakeJob) -> Reply:
    """Grade as ``EXAMPLE_TEST`` would: code that subtracts fails with the test's message."""
    if "a - b" not in job.code:
        return job.reply()
    return job.reply(default="failed", messages={t.id: FEEDBACK for t in job.tests})


@pytest.fixture
def graded_example(db_session: Session) -> Exercise:
    """An exercise whose example test checks ``add`` and explains a failure."""
    from app.domain.exercises.bank import upsert_exercise

    tag = uuid.uuid4().hex[:12]
    files = tiny_files(prompt_md="Add.\n", queue="cpu", tag=tag)
    files["examples/test_example.py"] = EXAMPLE_TEST
    exercise, _ = upsert_exercise(session=db_session, spec=ExerciseSpec.from_files(f"run-add-{tag}", files))
    db_session.commit()
    return exercise


def test_examples_spec_grades_only_the_examples(tiny_exercise: TinyExercise) -> None:
    spec = ExerciseSpec.from_files(tiny_exercise.slug, tiny_exercise.files)
    files = examples_files(spec)
    assert not any(p.startswith(("wrong/", "right/")) for p in files)
    assert files["tests/test_example.py"] == tiny_exercise.files["examples/test_example.py"]
    assert "tests/test_add.py" not in files and "[points]" not in files["exercise.toml"]
    rebuilt = ExerciseSpec.from_files(spec.slug, files)
    assert [t.id for t in rebuilt.tests] == ["test_example.py::test_example"] and rebuilt.max_score == 1
    assert (rebuilt.title, rebuilt.queue, rebuilt.topic) == (spec.title, spec.queue, spec.topic)


def test_run_reports_example_feedback_and_stores_nothing(
    learner_client: TestClient, graded_example: Exercise, db_session: Session, fake_sandbox: FakeSandbox
) -> None:
    fake_sandbox.handler = subtraction_fails_with_feedback
    before = db_session.scalar(select(func.count(Submission.id)))
    url = f"/api/exercises/{graded_example.slug}/runs"
    wrong = learner_client.post(url, json={"code": "def add(a, b):\n    return a - b\n"})
    assert wrong.status_code == 200, wrong.text
    body = wrong.json()
    assert body["id"] == "" and body["status"] == "graded" and body["verdict"] == "failed"
    assert [t["name"] for t in body["tests"]] == ["test_example.py::test_add_small"]
    assert "<EXAMPLE-FEEDBACK>" in body["tests"][0]["message"] and body["max_score"] == 1
    assert body["device"] and body["exercise"] == graded_example.slug

    right = learner_client.post(url, json={"code": "def add(a, b):\n    return a + b\n"}).json()
    assert right["verdict"] == "passed" and right["score"] == 1
    assert "HIDDEN-" not in wrong.text + str(right)  # hidden tests never run or show
    assert [list(job.test_files) for job in fake_sandbox.runs] == [["test_example.py"]] * 2
    assert db_session.scalar(select(func.count(Submission.id))) == before


def test_run_checks_code_like_a_submission(learner_client: TestClient, tiny_exercise: TinyExercise) -> None:
    url = f"/api/exercises/{tiny_exercise.slug}/runs"
    limit = learner_client.app.state.settings.max_code_bytes
    assert learner_client.post(url, json={"code": "x" * (limit + 1)}).status_code == 413
    assert learner_client.post(url, json={"code": "a\x00b"}).status_code == 422
    assert learner_client.post(url, json={"cod": "x"}).status_code == 422


def test_run_needs_a_login_and_json(
    client: TestClient, learner_client: TestClient, tiny_exercise: TinyExercise
) -> None:
    url = f"/api/exercises/{tiny_exercise.slug}/runs"
    forged = learner_client.post(url, content="code=x", headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert forged.status_code == 403
    learner_client.cookies.clear()
    assert client.post(url, json={"code": "x"}).status_code == 401


def test_run_is_rate_limited_per_user(learner_client: TestClient, tiny_exercise: TinyExercise) -> None:
    learner_client.app.state.run_gate = RunGate(max_parallel=1, per_user=0)
    response = learner_client.post(f"/api/exercises/{tiny_exercise.slug}/runs", json={"code": "x = 1\n"})
    assert response.status_code == 429 and int(response.headers["retry-after"]) >= 1


def test_gate_limits_per_user_and_in_parallel() -> None:
    gate = RunGate(max_parallel=1, per_user=2, window_s=2, wait_s=0.05)
    with gate.slot(1), pytest.raises(RateLimited, match="busy"), gate.slot(2):  # the one slot is taken
        pass
    with gate.slot(1):
        pass
    with pytest.raises(RateLimited, match="too many example runs") as caught, gate.slot(1):
        pass
    assert caught.value.retry_after_s == 2
    for _ in range(2):  # other users are counted on their own; user 2's busy refusal cost nothing
        with gate.slot(2):
            pass
    time.sleep(2.1)
    with gate.slot(1):
        pass

    entered = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with gate.slot(3):
            entered.set()
            release.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    assert entered.wait(5)
    with pytest.raises(RateLimited), gate.slot(4):
        pass
    release.set()
    holder.join(5)
