"""Timed assessments over the API: the clock, its accommodations, access code and networks, exam mode, the end.

The learner's client connects from an address in the exam room's network unless a test says otherwise (the
TestClient's ``client``); the end is brought about by moving a clock's end into the past in the database, then
running what the sweeper runs (``app.jobs.timed``), with the recording dispatcher.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.accounts import tokens
from app.domain.models import Exercise, Submission, SubmissionStatus, TimedAttempt, User, utcnow
from app.jobs.timed import close_attempt
from app.settings import Settings
from tests.app.web.test_api_courses import course, logout  # noqa: F401  (course: a fixture)
from tests.app.web.test_api_quiz import quiz  # noqa: F401  (a fixture)
from tests.conftest import PASSWORD, RecordingDispatcher, TinyExercise, make_test_client

if TYPE_CHECKING:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres

ROOM, OUTSIDE = "10.1.2.3", "192.0.2.7"
CODE = "def add(a, b):\n    return a + b\n"


@pytest.fixture
def from_room(app: FastAPI) -> Iterator[Callable[[str], TestClient]]:
    """Return ``client(address)``: a TestClient whose requests come from ``address``."""
    made: list[Any] = []

    def client(address: str) -> TestClient:
        test_client = make_test_client(app, client_address=address)
        made.append(test_client)
        return test_client

    yield client
    for test_client in made:
        test_client.close()


def _submit(client: TestClient, slug: str, assignment_id: int | None = None, **headers: str) -> Any:
    body: dict[str, Any] = {"code": CODE} if assignment_id is None else {"code": CODE, "assignment_id": assignment_id}
    return client.post(f"/api/exercises/{slug}/submissions", json=body, headers=headers)


def _notebook_of(code: str) -> dict[str, Any]:
    cell = {"cell_type": "code", "id": "a1", "metadata": {"tags": ["solution"]}, "source": code, "outputs": [],
            "execution_count": None}  # fmt: skip
    return {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [cell]}


def _login(client: TestClient, user: User) -> None:
    answer = client.post("/api/auth/login", json={"email": user.email, "password": PASSWORD})
    assert answer.status_code == 200, answer.text


def _exam(client: TestClient, course_slug: str, items: list[str], **fields: Any) -> dict[str, Any]:
    body = {
        "title": "Midterm", "items": [{"exercise": slug, "weight": 1} for slug in items], "time_limit_min": 30,
        "opens_at": (utcnow() - timedelta(hours=1)).isoformat(), "due_at": (utcnow() + timedelta(hours=3)).isoformat(),
        **fields,
    }  # fmt: skip
    made = client.post(f"/api/courses/{course_slug}/assignments", json=body)
    assert made.status_code == 201, made.text
    return dict(made.json())


@pytest.fixture
def exam_setup(
    client: TestClient, course: str, login: Callable[..., None], instructor: User,  # noqa: F811
    tiny_exercise: TinyExercise, quiz: Exercise,  # noqa: F811
) -> dict[str, Any]:  # fmt: skip
    login(client, instructor)
    exam = _exam(
        client, course, [tiny_exercise.slug, quiz.slug], access_code="room-42", allowed_networks="10.1.2.0/24",
        exam_mode=True,
    )  # fmt: skip
    other = client.post(
        f"/api/courses/{course}/assignments",
        json={"title": "Homework", "items": [{"exercise": tiny_exercise.slug, "weight": 1}]},
    ).json()
    logout(client)
    return {"exam": exam, "other": other, "course": course}


def test_a_learner_starts_only_with_the_code_from_the_room_and_only_once(
    from_room: Callable[[str], TestClient], exam_setup: dict[str, Any], learner: User, tiny_exercise: TinyExercise
) -> None:
    exam = exam_setup["exam"]
    start = f"/api/assignments/{exam['id']}/start"
    outside = from_room(OUTSIDE)
    _login(outside, learner)
    refused = outside.post(start, json={"access_code": "room-42"})
    assert refused.status_code == 403 and "exam room's network" in refused.json()["detail"]
    inside = from_room(ROOM)
    _login(inside, learner)
    wrong = inside.post(start, json={"access_code": "room-41"})
    assert wrong.status_code == 403 and "not the access code" in wrong.json()["detail"]
    before = inside.post(
        f"/api/exercises/{tiny_exercise.slug}/submissions", json={"code": CODE, "assignment_id": exam["id"]}
    )
    assert before.status_code == 403 and "start it on its page first" in before.json()["detail"]
    started = inside.post(start, json={"access_code": "room-42"})
    assert started.status_code == 200, started.text
    clock = started.json()
    assert 1790 < clock["remaining_s"] <= 1800 and clock["limit_min"] == 30
    again = inside.post(start, json={"access_code": "room-42"}).json()
    assert again["ends_at"] == clock["ends_at"]  # one clock, whatever the browser does
    shown = inside.get(f"/api/assignments/{exam['id']}").json()
    assert shown["my_time"]["ends_at"] == clock["ends_at"] and shown["needs_access_code"] is True
    assert shown["allowed_networks"] is None  # the room's networks are staff's to read
    # Working from outside the room is refused too, not only starting.
    away = outside.post(
        f"/api/exercises/{tiny_exercise.slug}/submissions", json={"code": CODE, "assignment_id": exam["id"]}
    )
    assert away.status_code == 403 and "exam room's network" in away.json()["detail"]
    made = inside.post(
        f"/api/exercises/{tiny_exercise.slug}/submissions", json={"code": CODE, "assignment_id": exam["id"]}
    )
    assert made.status_code == 202, made.text


def test_during_an_exam_the_rest_of_gpulab_is_closed_to_that_learner(
    from_room: Callable[[str], TestClient], exam_setup: dict[str, Any], learner: User, tiny_exercise: TinyExercise,
    db_session: Session,
) -> None:  # fmt: skip
    exam, other = exam_setup["exam"], exam_setup["other"]
    client = from_room(ROOM)
    _login(client, learner)
    assert client.get("/api/exercises").status_code == 200  # before the exam
    assert client.post(f"/api/assignments/{exam['id']}/start", json={"access_code": "room-42"}).status_code == 200
    catalogue = client.get("/api/exercises")
    assert catalogue.status_code == 403 and "you are in the exam 'Midterm'" in catalogue.json()["detail"]
    assert client.get("/exercises").status_code == 403  # the catalogue page
    assert client.get(f"/exercises/{tiny_exercise.slug}").status_code == 403  # the practice page
    assert client.get(f"/api/exercises/{tiny_exercise.slug}/notebook").status_code == 403
    practice = client.post(f"/api/exercises/{tiny_exercise.slug}/submissions", json={"code": CODE})
    assert practice.status_code == 403
    elsewhere = client.post(
        f"/api/exercises/{tiny_exercise.slug}/submissions", json={"code": CODE, "assignment_id": other["id"]}
    )
    assert elsewhere.status_code == 403 and "the rest of gpulab is closed" in elsewhere.json()["detail"]
    run = client.post(f"/api/exercises/{tiny_exercise.slug}/runs", json={"code": CODE})
    assert run.status_code == 403
    draft = client.put(f"/api/exercises/{tiny_exercise.slug}/draft", json={"base_revision": 0, "code": CODE})
    assert draft.status_code == 403
    page = client.get(f"/courses/{exam_setup['course']}/assignments/{exam['id']}/exercises/{tiny_exercise.slug}")
    assert page.status_code == 200  # the exam's own pages stay open
    # A token is the same learner under the same rule.
    _row, token = tokens.create_token(
        session=db_session, user=learner, name="cli", scopes=[tokens.Scope.read, tokens.Scope.submit]
    )
    db_session.commit()
    bearer = {"Authorization": f"Bearer {token}"}
    assert (
        client.post(f"/api/exercises/{tiny_exercise.slug}/submissions", json={"code": CODE}, headers=bearer).status_code
        == 403
    )
    assert db_session.scalar(select(func.count()).select_from(Submission)) == 0


def test_an_accommodation_gives_a_learner_half_again_and_the_close_still_ends_every_clock(
    client: TestClient, from_room: Callable[[str], TestClient], course: str,  # noqa: F811
    login: Callable[..., None], instructor: User, learner: User, tiny_exercise: TinyExercise,
) -> None:  # fmt: skip
    login(client, instructor)
    exam = _exam(client, course, [tiny_exercise.slug])
    granted = client.post(
        f"/api/assignments/{exam['id']}/extensions",
        json={"email": learner.email, "time_multiplier": 1.5, "reason": "accommodation: extra time"},
    )
    assert granted.status_code == 201, granted.text
    assert granted.json()["due_at"] is None and granted.json()["time_multiplier"] == 1.5
    short = _exam(client, course, [tiny_exercise.slug], due_at=(utcnow() + timedelta(minutes=10)).isoformat())
    logout(client)
    learner_client = from_room(ROOM)
    _login(learner_client, learner)
    longer = learner_client.post(f"/api/assignments/{exam['id']}/start", json={}).json()
    assert longer["limit_min"] == 45 and 2690 < longer["remaining_s"] <= 2700
    capped = learner_client.post(f"/api/assignments/{short['id']}/start", json={}).json()
    assert capped["remaining_s"] <= 600 and capped["limit_min"] <= 10  # never later than the close


def test_the_end_submits_the_last_drafts_once_and_refuses_what_comes_after(
    from_room: Callable[[str], TestClient], exam_setup: dict[str, Any], learner: User, tiny_exercise: TinyExercise,
    quiz: Exercise, db_session: Session, settings: Settings, dispatcher: RecordingDispatcher,  # noqa: F811
) -> None:  # fmt: skip
    exam = exam_setup["exam"]
    client = from_room(ROOM)
    _login(client, learner)
    assert client.post(f"/api/assignments/{exam['id']}/start", json={"access_code": "room-42"}).status_code == 200
    saved = client.put(
        f"/api/exercises/{tiny_exercise.slug}/draft",
        json={"base_revision": 0, "code": "def add(a, b):\n    return 99\n", "assignment_id": exam["id"]},
    )
    assert saved.status_code == 200, saved.text
    answers = client.put(
        f"/api/exercises/{quiz.slug}/draft",
        json={"base_revision": 0, "answers": {"q1": ["b"]}, "assignment_id": exam["id"]},
    )
    assert answers.status_code == 200, answers.text
    attempt = db_session.scalars(select(TimedAttempt).where(TimedAttempt.user_id == learner.id)).one()
    attempt.ends_at = utcnow() - timedelta(seconds=1)  # the clock ran out
    db_session.commit()

    late = client.post(
        f"/api/exercises/{tiny_exercise.slug}/submissions",
        json={"code": CODE, "assignment_id": exam["id"]},
    )
    assert late.status_code == 403 and "your time ended" in late.json()["detail"]
    stale = client.put(
        f"/api/exercises/{tiny_exercise.slug}/draft",
        json={"base_revision": 1, "code": "after the end", "assignment_id": exam["id"]},
    )
    assert stale.status_code == 403 and "not saved: your time ended" in stale.json()["detail"]

    sent = close_attempt(session=db_session, attempt_id=attempt.id, settings=settings)
    db_session.commit()
    assert sent is not None and len(sent) == 1  # the code draft, to be graded after the commit
    assert close_attempt(session=db_session, attempt_id=attempt.id, settings=settings) is None  # once
    made = db_session.scalars(select(Submission).where(Submission.user_id == learner.id)).all()
    code = [s for s in made if s.exercise_version.kind == "code"]
    graded_quiz = [s for s in made if s.exercise_version.kind == "quiz"]
    assert [s.code for s in code] == ["def add(a, b):\n    return 99\n"] and code[0].assignment_id == exam["id"]
    assert code[0].status is SubmissionStatus.queued and code[0].created_at < attempt.ends_at
    assert len(graded_quiz) == 1 and graded_quiz[0].status is SubmissionStatus.graded
    db_session.refresh(attempt)
    assert attempt.closed_at is not None and set(attempt.submitted or {}) == {tiny_exercise.slug, quiz.slug}
    assert client.get(f"/api/assignments/{exam['id']}/drafts").status_code == 403  # staff's, not the learner's
    shown = client.get(f"/api/assignments/{exam['id']}").json()["my_time"]
    assert shown["remaining_s"] == 0 and set(shown["submitted"]) == {tiny_exercise.slug, quiz.slug}
    assert dispatcher.calls == [] or all(call[0] != code[0].id for call in dispatcher.calls)  # sent by the sweeper


def test_staff_set_a_timed_assessment_and_an_accommodation_through_the_forms(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,  # noqa: F811
    tiny_exercise: TinyExercise, db_session: Session,
) -> None:  # fmt: skip
    from app.domain.models import Assignment, Extension
    from tests.app.web.test_pages_courses import form_token

    login(client, instructor)
    token = form_token(client, f"/courses/{course}/assignments/new")
    fields = {
        "csrf_token": token, "title": "Quiz 1", "tz": "UTC", "items": f"{tiny_exercise.slug}\n", "is_published": "1",
        "time_limit_min": "20", "submit_on_expiry": "1", "access_code": " lab-7 ", "allowed_networks": "10.1.2.9/24",
        "exam_mode": "1",
    }  # fmt: skip
    saved = client.post(f"/courses/{course}/assignments", data=fields, follow_redirects=False)
    assert saved.status_code == 303, saved.text
    made = db_session.scalars(select(Assignment).where(Assignment.title == "Quiz 1")).one()
    assert (made.time_limit_min, made.access_code, made.allowed_networks) == (20, "lab-7", "10.1.2.0/24")
    assert made.exam_mode and made.submit_on_expiry and not made.feedback_after_close
    bad = client.post(f"/courses/{course}/assignments", data={**fields, "allowed_networks": "the lab"})
    assert bad.status_code == 422 and "is not a network" in bad.text
    page = client.get(f"/courses/{course}/assignments/{made.id}/extensions").text
    assert 'name="time_multiplier"' in page and "Accommodations on this timed assessment (20 minutes)" in page
    granted = client.post(
        f"/courses/{course}/assignments/{made.id}/extensions",
        data={
            "csrf_token": token,
            "email": learner.email,
            "keep_dates": "1",
            "time_multiplier": "1.5",
            "extra_minutes": "5",
            "reason": "accommodation letter",
        },
        follow_redirects=False,
    )
    assert granted.status_code == 303, granted.text
    extension = db_session.scalars(select(Extension).where(Extension.user_id == learner.id)).one()
    assert extension.due_at is None and extension.time_multiplier == 1.5 and extension.extra_minutes == 5
    listed = client.get(f"/courses/{course}/assignments/{made.id}/extensions").text
    assert "(time \u00d71.5 +5 min)" in listed


def test_the_assignment_page_offers_the_start_then_counts_down_and_the_exercise_waits_for_the_start(
    from_room: Callable[[str], TestClient], exam_setup: dict[str, Any], learner: User, tiny_exercise: TinyExercise
) -> None:
    exam, course_slug = exam_setup["exam"], exam_setup["course"]
    client = from_room(ROOM)
    _login(client, learner)
    url = f"/courses/{course_slug}/assignments/{exam['id']}"
    page = client.get(url)
    assert page.status_code == 200, page.text
    assert 'action="' + url + '/start"' in page.text and 'name="access_code"' in page.text
    assert "30 minutes from when you start" in page.text
    waiting = client.get(f"{url}/exercises/{tiny_exercise.slug}", follow_redirects=False)
    assert waiting.status_code == 303 and waiting.headers["location"] == url
    token = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert token is not None
    started = client.post(f"{url}/start", data={"csrf_token": token.group(1), "access_code": "room-42"},
                          follow_redirects=False)  # fmt: skip
    assert started.status_code == 303
    counting = client.get(url).text
    assert 'class="countdown"' in counting and "data-remaining-s=" in counting and "Start</button>" not in counting
    exercise = client.get(f"{url}/exercises/{tiny_exercise.slug}")
    assert exercise.status_code == 200 and 'class="countdown"' in exercise.text


def test_staff_read_a_learners_drafts_only_once_their_time_has_ended(
    client: TestClient, from_room: Callable[[str], TestClient], exam_setup: dict[str, Any], learner: User,
    instructor: User, tiny_exercise: TinyExercise, db_session: Session,
) -> None:  # fmt: skip
    exam = exam_setup["exam"]
    learner_client = from_room(ROOM)
    _login(learner_client, learner)
    learner_client.post(f"/api/assignments/{exam['id']}/start", json={"access_code": "room-42"})
    learner_client.put(
        f"/api/exercises/{tiny_exercise.slug}/draft",
        json={"base_revision": 0, "code": "# unfinished\n", "assignment_id": exam["id"]},
    )
    _login(client, instructor)
    assert client.get(f"/api/assignments/{exam['id']}/drafts").json() == []  # still the learner's own
    attempt = db_session.scalars(select(TimedAttempt).where(TimedAttempt.user_id == learner.id)).one()
    attempt.ends_at = utcnow() - timedelta(minutes=1)
    db_session.commit()
    [read] = client.get(f"/api/assignments/{exam['id']}/drafts").json()
    assert (
        read["email"] == learner.email and read["exercise"] == tiny_exercise.slug and read["code"] == "# unfinished\n"
    )
    assert read["submitted"] is None  # not closed yet: the sweeper submits it at its next pass
