"""The quiz API: questions without keys, graded attempts stored as submissions, clear 422s, privacy."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.models import Exercise, Submission, SubmissionStatus, User
from tests.conftest import TinyExercise

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres

QUIZ = """
[[question]]
id = "q1"
type = "single"
prompt = "Which one?"
options = [{ id = "a", text = "Option A" }, { id = "b", text = "Option B" }]
answer = ["b"]
explanation = "SECRET-EXPLANATION-1"
hint = "SECRET-HINT-1"
common_mistakes = ["SECRET-MISTAKE-1"]

[[question]]
id = "q2"
type = "multiple"
points = 2
prompt = "Which ones?"
options = [{ id = "a", text = "A" }, { id = "b", text = "B" }, { id = "c", text = "C" }]
answer = ["a", "c"]
explanation = "SECRET-EXPLANATION-2"

[[question]]
id = "q3"
type = "text"
min_words = 5
max_chars = 300
prompt = "Explain it."
model_answer = "SECRET-MODEL-ANSWER"
grading = "self"
rubric = ["SECRET-RUBRIC"]
"""
SECRETS = ("SECRET-", '"answer"', '"correct"', "explanation", "model_answer", "rubric")


@pytest.fixture
def quiz(db_session: Session) -> Exercise:
    from app.domain.exercises.bank import upsert_exercise
    from worker.bank.spec import ExerciseSpec

    files = {
        "exercise.toml": 'title = "A quiz"\nkind = "quiz"\ntopic = "Quizzes"\n',
        "prompt.md": "Answer the **questions**.",
        "quiz.toml": QUIZ,
    }
    exercise, _ = upsert_exercise(
        session=db_session, spec=ExerciseSpec.from_files(f"quiz-{uuid.uuid4().hex[:10]}", files)
    )
    db_session.commit()
    return exercise


def _answer(client: TestClient, slug: str, answers: object) -> dict:
    response = client.post(f"/api/exercises/{slug}/quiz", json={"answers": answers})
    assert response.status_code == 200, response.text
    body: dict = response.json()
    return body


def test_detail_sends_questions_and_options_but_never_keys(learner_client: TestClient, quiz: Exercise) -> None:
    response = learner_client.get(f"/api/exercises/{quiz.slug}")
    assert response.status_code == 200
    body = response.json()
    assert body["kind"] == "quiz" and body["points"] == 4.0 and body["starter_code"] == ""
    questions = body["quiz"]["questions"]
    assert [q["id"] for q in questions] == ["q1", "q2", "q3"]
    assert questions[0]["options"] == [
        {"id": "a", "text": "Option A", "code": False},
        {"id": "b", "text": "Option B", "code": False},
    ]
    assert questions[2]["min_words"] == 5 and questions[2]["max_chars"] == 300
    for secret in SECRETS:
        assert secret not in response.text, secret


def test_code_exercises_have_no_quiz(learner_client: TestClient, tiny_exercise: TinyExercise) -> None:
    assert learner_client.get(f"/api/exercises/{tiny_exercise.slug}").json()["quiz"] is None


def test_answer_returns_feedback_and_stores_a_graded_submission(
    learner_client: TestClient, quiz: Exercise, learner: User, db_session: Session
) -> None:
    body = _answer(learner_client, quiz.slug, {"q1": ["a"], "q2": ["a"], "q3": "Every GPU holds the whole model."})
    assert (body["score"], body["max_score"], body["passed"], body["verdict"]) == (2.0, 4.0, False, "failed")
    assert (body["best_score"], body["attempts"]) == (2.0, 1)
    q1, q2, q3 = body["questions"]
    assert (q1["correct"], q1["score"], q1["explanation"], q1["hint"]) == (
        False,
        0.0,
        "SECRET-EXPLANATION-1",
        "SECRET-HINT-1",
    )
    assert q1["common_mistakes"] == ["SECRET-MISTAKE-1"]
    assert (q2["correct"], q2["score"], q2["max_score"]) == (False, 1.0, 2.0)
    assert (q3["correct"], q3["model_answer"], q3["rubric"]) == (True, "SECRET-MODEL-ANSWER", ["SECRET-RUBRIC"])

    submission = db_session.get(Submission, body["submission_id"])
    assert submission is not None and submission.user_id == learner.id
    assert submission.status is SubmissionStatus.graded and submission.score == 2.0
    assert submission.code == '{"q1":["a"],"q2":["a"],"q3":"Every GPU holds the whole model."}'
    assert [(t.name, t.outcome, t.points) for t in submission.tests] == [
        ("q1", "failed", 0.0), ("q2", "failed", 1.0), ("q3", "passed", 1.0)
    ]  # fmt: skip
    assert "SECRET-EXPLANATION-1" in submission.tests[0].message

    shown = learner_client.get(f"/api/submissions/{body['submission_id']}").json()
    assert (shown["status"], shown["verdict"], shown["score"]) == ("graded", "failed", 2.0)


def test_retry_keeps_the_best_score(learner_client: TestClient, quiz: Exercise) -> None:
    first = _answer(learner_client, quiz.slug, {"q1": ["b"], "q2": ["a", "c"], "q3": "one two three four five six"})
    assert (first["score"], first["passed"]) == (4.0, True)
    second = _answer(learner_client, quiz.slug, {"q1": ["a"]})
    assert (second["score"], second["best_score"], second["attempts"]) == (0.0, 4.0, 2)
    skipped = second["questions"][1]
    assert (skipped["answered"], skipped["explanation"]) == (False, None)
    assert "SECRET-EXPLANATION-2" not in str(second)


@pytest.mark.parametrize(
    ("answers", "problem"),
    [
        ({"q9": ["a"]}, "unknown question(s): q9"),
        ({"q1": ["z"]}, "question q1 has no option 'z'"),
        ({"q1": ["a", "b"]}, "takes exactly one option"),
        ({"q3": "x" * 301}, "longer than 300 characters"),
        ({"q3": ["a"]}, "takes a text answer"),
        ({}, "answer at least one question"),
        ({"q1": 3}, "answers.q1"),
    ],
)
def test_malformed_answers_are_422_with_a_clear_message(
    learner_client: TestClient, quiz: Exercise, answers: object, problem: str, db_session: Session
) -> None:
    response = learner_client.post(f"/api/exercises/{quiz.slug}/quiz", json={"answers": answers})
    assert response.status_code == 422, response.text
    assert problem in response.json()["detail"]
    assert db_session.scalars(select(Submission).where(Submission.code.contains("q"))).first() is None


def test_unknown_fields_and_code_exercises_are_refused(
    learner_client: TestClient, quiz: Exercise, tiny_exercise: TinyExercise
) -> None:
    extra = learner_client.post(f"/api/exercises/{quiz.slug}/quiz", json={"answers": {"q1": ["b"]}, "x": 1})
    assert extra.status_code == 422
    code = learner_client.post(f"/api/exercises/{tiny_exercise.slug}/quiz", json={"answers": {"q1": ["b"]}})
    assert code.status_code == 422 and "not a quiz" in code.json()["detail"]
    assert learner_client.post("/api/exercises/no-such-quiz/quiz", json={"answers": {}}).status_code == 404


def test_needs_login_and_json(client: TestClient, quiz: Exercise, learner: User, login: Callable[..., None]) -> None:
    assert client.post(f"/api/exercises/{quiz.slug}/quiz", json={"answers": {"q1": ["b"]}}).status_code == 401
    login(client, learner)
    forged = client.post(f"/api/exercises/{quiz.slug}/quiz", data={"answers": "q1"})
    assert forged.status_code == 403


def test_other_learners_cannot_see_an_attempt(
    client: TestClient, quiz: Exercise, learner: User, other_learner: User, login: Callable[..., None]
) -> None:
    login(client, learner)
    mine = _answer(client, quiz.slug, {"q1": ["b"]})
    client.post("/api/auth/logout", json={})
    login(client, other_learner)
    assert client.get(f"/api/submissions/{mine['submission_id']}").status_code == 404
    theirs = _answer(client, quiz.slug, {"q1": ["a"]})
    assert (theirs["best_score"], theirs["attempts"]) == (0.0, 1), "progress counts only my own attempts"
    listed = client.get("/api/me/submissions").json()
    assert mine["submission_id"] not in {s["id"] for s in listed}
