"""Attempts are spent only on answers, and practice cannot bypass an assignment (issue 21, items 2 and 3)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.exercises.bank import upsert_exercise
from app.domain.models import Role, Submission, SubmissionStatus, User
from tests.app.web.test_api_courses import CODE, _assignment, _iso, course, logout
from tests.app.web.test_api_quiz import QUIZ
from tests.app.web.test_pages_courses import form_token
from tests.conftest import TinyExercise
from worker.bank.spec import ExerciseSpec
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres
__all__ = ["course"]  # the fixture, shared with the course API tests

WHOLE = {"q1": ["a"], "q2": ["a"], "q3": "one two three four five six"}


def _stored(session: Session, user: User) -> int:
    session.expire_all()
    return int(session.scalar(select(func.count()).select_from(Submission).where(Submission.user_id == user.id)) or 0)


def test_code_that_is_no_answer_is_refused_and_costs_nothing(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    tiny_exercise: TinyExercise, db_session: Session,
) -> None:  # fmt: skip
    login(client, instructor)
    made = _assignment(client, course, tiny_exercise.slug, max_attempts=1)
    logout(client)
    login(client, learner)
    url = f"/api/exercises/{tiny_exercise.slug}/submissions"
    starter = tiny_exercise.files["starter.py"]
    for code, says in (("", "the code is empty"), ("  \n\t\n", "the code is empty"), (starter, "starter code")):
        refused = client.post(url, json={"code": code, "assignment_id": made["id"]})
        assert refused.status_code == 422 and says in refused.json()["detail"], refused.text
        assert "no attempt was used" in refused.json()["detail"]
    assert _stored(db_session, learner) == 0
    gate = client.get("/api/courses/gpu-101").json()["assignments"][0]["items"][0]["gate"]
    assert gate["attempts_used"] == 0 and gate["attempts_left"] == 1
    assert client.post(url, json={"code": CODE, "assignment_id": made["id"]}).status_code == 202


def test_practice_runs_only_examples_while_an_assignment_holds_the_exercise(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    other_learner: User, tiny_exercise: TinyExercise, db_session: Session,
) -> None:  # fmt: skip
    login(client, instructor)
    made = _assignment(client, course, tiny_exercise.slug, max_attempts=2, due_at=_iso(timedelta(days=3)))
    assert made["practice"] == "examples_only"  # the default
    assert client.post(f"/api/exercises/{tiny_exercise.slug}/submissions", json={"code": CODE}).status_code == 202
    logout(client)  # staff practise freely

    login(client, learner)
    url = f"/api/exercises/{tiny_exercise.slug}/submissions"
    refused = client.post(url, json={"code": CODE})
    assert refused.status_code == 403
    assert "'Week 1' (GPU 101)" in refused.json()["detail"] and "example tests" in refused.json()["detail"]
    assert "submit under the assignment" in refused.json()["detail"]  # true: its gate lets them in
    assert _stored(db_session, learner) == 0
    page = client.get(f"/exercises/{tiny_exercise.slug}").text
    assert 'id="practice-bound"' in page and f"/courses/gpu-101/assignments/{made['id']}/exercises/" in page
    assert client.post(url, json={"code": CODE, "assignment_id": made["id"]}).status_code == 202
    token = form_token(client, f"/exercises/{tiny_exercise.slug}")
    no_script = client.post(f"/exercises/{tiny_exercise.slug}/submissions", data={"csrf_token": token, "code": CODE})
    assert no_script.status_code == 403 and "example tests" in no_script.text  # the form without JavaScript too
    assert _stored(db_session, learner) == 1
    assert client.post(url, json={"code": CODE, "assignment_id": made["id"]}).status_code == 202  # the last one
    used_up = client.post(url, json={"code": CODE}).json()["detail"]
    assert "submit under the assignment" not in used_up and "under the assignment: no attempts left" in used_up
    page = client.get(f"/exercises/{tiny_exercise.slug}").text
    assert "Submit it under the assignment" not in page and "Under the assignment: no attempts left" in page
    logout(client)

    login(client, other_learner)  # not in the course: plain practice
    assert client.post(url, json={"code": CODE}).status_code == 202


def test_counted_practice_is_an_attempt_under_the_assignment(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    tiny_exercise: TinyExercise, db_session: Session,
) -> None:  # fmt: skip
    login(client, instructor)
    made = _assignment(client, course, tiny_exercise.slug, max_attempts=1, practice="counted")
    assert made["practice"] == "counted"
    logout(client)
    login(client, learner)
    url = f"/api/exercises/{tiny_exercise.slug}/submissions"
    page = client.get(f"/exercises/{tiny_exercise.slug}").text  # the practice page asks first, as the assignment's
    assert "counts as an attempt under it" in page and 'data-attempts-left="1" data-attempts-max="1"' in page
    first = client.post(url, json={"code": CODE})
    assert first.status_code == 202
    assert db_session.get(Submission, first.json()["id"]).assignment_id == made["id"]  # type: ignore[union-attr]
    attempts = client.get(f"/api/exercises/{tiny_exercise.slug}/attempts").json()
    assert [a["assignment_id"] for a in attempts] == [made["id"]]
    again = client.post(url, json={"code": CODE})
    assert again.status_code == 403 and "no attempts left" in again.json()["detail"]
    history = client.get(f"/exercises/{tiny_exercise.slug}/history").text
    assert 'class="made-in"><a href="/courses/gpu-101/assignments/' in history and "Week 1" in history
    logout(client)
    login(client, instructor)  # staff's list of submissions says where each was made too
    listed = client.get(f"/instructor/exercises/{tiny_exercise.slug}/submissions").text
    assert f'class="made-in"><a href="/courses/gpu-101/assignments/{made["id"]}">Week 1</a>' in listed
    logout(client)
    login(client, learner)
    grades = client.get("/courses/gpu-101/grades").text  # titles, not slugs, each a link to the exercise
    link = f"/courses/gpu-101/assignments/{made['id']}/exercises/{tiny_exercise.slug}"
    assert f'<th scope="row"><a href="{link}">Add two numbers</a></th>' in grades


def test_counted_practice_after_the_assignment_closes_is_refused(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    tiny_exercise: TinyExercise,
) -> None:  # fmt: skip
    login(client, instructor)
    _assignment(client, course, tiny_exercise.slug, practice="counted", opens_at=_iso(timedelta(days=-3)),
                due_at=_iso(timedelta(days=-1)))  # fmt: skip
    logout(client)
    login(client, learner)
    closed = client.post(f"/api/exercises/{tiny_exercise.slug}/submissions", json={"code": CODE})
    assert closed.status_code == 403 and "closed on" in closed.json()["detail"]


def test_an_unknown_practice_policy_is_refused(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, tiny_exercise: TinyExercise
) -> None:
    login(client, instructor)
    body = {"title": "W", "items": [{"exercise": tiny_exercise.slug}], "practice": "anything"}
    assert client.post(f"/api/courses/{course}/assignments", json=body).status_code == 422


def test_a_quiz_under_an_assignment_wants_every_answer_and_keeps_explanations_until_the_last_attempt(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    db_session: Session,
) -> None:  # fmt: skip
    files = {"exercise.toml": 'title = "Week quiz"\nkind = "quiz"\ntopic = "Quizzes"\n', "prompt.md": "Go.",
             "quiz.toml": QUIZ}  # fmt: skip
    quiz, _ = upsert_exercise(session=db_session, spec=ExerciseSpec.from_files("fair-quiz", files))
    db_session.commit()
    login(client, instructor)
    made = _assignment(client, course, quiz.slug, max_attempts=2, due_at=_iso(timedelta(days=2)))
    logout(client)
    login(client, learner)
    url = f"/api/exercises/{quiz.slug}/quiz"

    partial = client.post(url, json={"answers": {"q1": ["b"]}, "assignment_id": made["id"]})
    assert partial.status_code == 422 and "2 of 3 questions are unanswered (q2, q3)" in partial.json()["detail"]
    assert _stored(db_session, learner) == 0
    practice = client.post(url, json={"answers": WHOLE})  # the assignment holds it: examples only, none for a quiz
    assert practice.status_code == 403

    first = client.post(url, json={"answers": WHOLE, "assignment_id": made["id"]}).json()
    assert first["answers_withheld"] is True
    assert all(q["explanation"] is None and q["model_answer"] is None for q in first["questions"])
    history = client.get(f"/api/exercises/{quiz.slug}/attempts").json()
    assert "SECRET-EXPLANATION" not in str(history) and "after your last attempt" in str(history)

    last = client.post(url, json={"answers": WHOLE, "assignment_id": made["id"]}).json()
    assert last["answers_withheld"] is False
    assert [q["explanation"] for q in last["questions"]][:2] == ["SECRET-EXPLANATION-1", "SECRET-EXPLANATION-2"]
    assert "SECRET-EXPLANATION-1" in str(client.get(f"/api/exercises/{quiz.slug}/attempts").json())

    history = client.get(f"/exercises/{quiz.slug}/history?assignment={made['id']}").text
    assert "Questions and your answers" in history and "<p>Which one?</p>" in history  # the prompts, as prose
    assert "<strong>Your answer:</strong> Option A</p>" in history  # the option's text, not its id
    assert '<blockquote class="answer-text">one two three four five six</blockquote>' in history
    assert "&#34;q1&#34;" not in history and "Code of attempt" not in history  # no raw JSON
    assert 'href="/courses/gpu-101">GPU 101</a>' in history  # opened from the assignment: its course context


def test_course_staff_pages_link_grading_similarity_and_insights_which_a_ta_may_read(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,
    make_user: Callable[..., User], tiny_exercise: TinyExercise, db_session: Session,
) -> None:  # fmt: skip
    ta = make_user(Role.learner)
    login(client, instructor)
    made = _assignment(client, course, tiny_exercise.slug, practice="counted")
    rows = client.post("/api/courses/gpu-101/members", json={"csv": f"email,name,role\n{ta.email},T,ta\n"})
    assert rows.status_code == 200
    base = f"/courses/gpu-101/assignments/{made['id']}"
    page = client.get("/courses/gpu-101").text
    for link in (f"{base}/grading", f"/instructor/assignments/{made['id']}/similarity",
                 f"{base}/exercises/{tiny_exercise.slug}/insights"):  # fmt: skip
        assert f'href="{link}"' in page, link
    again = client.get("/courses/gpu-101/members", follow_redirects=False)  # a reload after enrolling
    assert again.status_code == 303 and again.headers["location"] == "/courses/gpu-101/manage#members"
    logout(client)

    login(client, learner)
    sent = client.post(f"/api/exercises/{tiny_exercise.slug}/submissions", json={"code": CODE})
    assert sent.status_code == 202
    row = db_session.get(Submission, sent.json()["id"])
    assert row is not None
    row.status, row.verdict, row.score = SubmissionStatus.graded, Verdict.failed, 0.0  # as a grading would leave it
    db_session.commit()
    assert client.get(f"{base}/exercises/{tiny_exercise.slug}/insights").status_code == 403
    logout(client)
    login(client, ta)
    insights = client.get(f"{base}/exercises/{tiny_exercise.slug}/insights")
    assert insights.status_code == 200 and "What the class gets wrong" in insights.text
    assert learner.email in insights.text and "insights.csv" not in insights.text  # read-only: no instructor links
    assert client.get(f"/instructor/exercises/{tiny_exercise.slug}/insights").status_code == 403  # site-wide
