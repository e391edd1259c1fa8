"""Drafts over the API: saved per item with a revision, never an attempt, never another learner's or tab's loss."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.accounts import tokens
from app.domain.models import Draft, Exercise, Submission, User
from tests.app.web.test_api_courses import _assignment, course, logout  # noqa: F401  (course: a fixture)
from tests.app.web.test_api_quiz import quiz  # noqa: F401  (a fixture)
from tests.conftest import TinyExercise

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres


JSON = {"Content-Type": "application/json"}  # the CSRF rule for a state-changing call with the session cookie


def _url(slug: str) -> str:
    return f"/api/exercises/{slug}/draft"


def test_a_draft_is_saved_read_back_and_each_save_names_the_revision_it_started_from(
    learner_client: TestClient, tiny_exercise: TinyExercise, db_session: Session
) -> None:
    url = _url(tiny_exercise.slug)
    assert learner_client.get(url).json() == {"revision": 0, "code": None, "answers": None, "updated_at": None}
    first = learner_client.put(url, json={"base_revision": 0, "code": "def add(a, b):\n    return 0\n"})
    assert first.status_code == 200, first.text
    assert first.json()["revision"] == 1 and first.json()["updated_at"].endswith(("Z", "+00:00"))
    second = learner_client.put(url, json={"base_revision": 1, "code": "def add(a, b):\n    return a + b\n"})
    assert second.json()["revision"] == 2
    # A tab that still holds revision 1 must not overwrite revision 2 without knowing it.
    stale = learner_client.put(url, json={"base_revision": 1, "code": "lost?"})
    assert stale.status_code == 409 and "revision 2" in stale.json()["detail"], stale.text
    read = learner_client.get(url).json()
    assert read["revision"] == 2 and read["code"] == "def add(a, b):\n    return a + b\n"
    # Never an attempt: no submission was made by any of it.
    assert db_session.scalar(select(func.count()).select_from(Submission)) == 0
    assert learner_client.request("DELETE", url, headers=JSON).status_code == 204
    assert learner_client.get(url).json()["revision"] == 0
    assert learner_client.put(url, json={"base_revision": 0, "code": "again"}).json()["revision"] == 1


def test_bad_drafts_are_refused_with_the_reason_and_store_nothing(
    learner_client: TestClient, tiny_exercise: TinyExercise, db_session: Session
) -> None:
    url = _url(tiny_exercise.slug)
    too_big = learner_client.put(url, json={"base_revision": 0, "code": "x" * (100 * 1024)})
    assert too_big.status_code == 422 and too_big.json()["detail"].startswith("Your code is 100 KB; the limit is 64 KB")
    huge = learner_client.put(url, json={"base_revision": 0, "code": "x" * (1024 * 1024)})  # over the body limit
    assert huge.status_code == 413 and huge.json()["detail"].startswith("Your code is over the limit of 64 KB")
    assert learner_client.put(url, json={"base_revision": 0, "code": "x\x00"}).status_code == 422
    both = learner_client.put(url, json={"base_revision": 0})
    assert both.status_code == 422 and "one of them" in both.json()["detail"]
    answers = learner_client.put(url, json={"base_revision": 0, "answers": {"q1": ["a"]}})
    assert answers.status_code == 422 and "code exercise" in answers.json()["detail"]
    typo = learner_client.put(url, json={"base_revision": 0, "cod": "x"})
    assert typo.status_code == 422
    assert db_session.scalar(select(func.count()).select_from(Draft)) == 0


def test_a_quiz_keeps_its_answers_so_far(learner_client: TestClient, quiz: Exercise) -> None:  # noqa: F811
    url = _url(quiz.slug)
    saved = learner_client.put(url, json={"base_revision": 0, "answers": {"q1": ["b"], "q3": "half a thought"}})
    assert saved.status_code == 200, saved.text
    assert learner_client.get(url).json()["answers"] == {"q1": ["b"], "q3": "half a thought"}
    wrong = learner_client.put(url, json={"base_revision": 1, "answers": {"q1": ["z"]}})
    assert wrong.status_code == 422 and "no option 'z'" in wrong.json()["detail"]
    assert learner_client.put(url, json={"base_revision": 1, "answers": {}}).json()["revision"] == 2  # cleared


def test_drafts_are_per_assignment_and_per_learner(
    client: TestClient, course: str, login: Callable[..., None], instructor: User, learner: User,  # noqa: F811
    other_learner: User, tiny_exercise: TinyExercise,
) -> None:  # fmt: skip
    login(client, instructor)
    made = _assignment(client, course, tiny_exercise.slug)
    logout(client)
    url = _url(tiny_exercise.slug)
    login(client, learner)
    assert client.put(url, json={"base_revision": 0, "code": "practice"}).status_code == 200
    under = client.put(url, json={"base_revision": 0, "code": "assignment", "assignment_id": made["id"]})
    assert under.status_code == 200, under.text
    assert client.get(url).json()["code"] == "practice"
    assert client.get(url, params={"assignment_id": made["id"]}).json()["code"] == "assignment"
    logout(client)
    login(client, other_learner)  # not in the course: its assignment is not there for them, nor the drafts of others
    assert client.get(url, params={"assignment_id": made["id"]}).status_code == 404
    assert client.get(url).json()["revision"] == 0


def test_a_token_reads_drafts_with_read_and_writes_them_only_with_submit(
    client: TestClient, learner: User, tiny_exercise: TinyExercise, db_session: Session
) -> None:
    url = _url(tiny_exercise.slug)
    _row, read_only = tokens.create_token(session=db_session, user=learner, name="r", scopes=[tokens.Scope.read])
    _row, writer = tokens.create_token(
        session=db_session, user=learner, name="w", scopes=[tokens.Scope.read, tokens.Scope.submit]
    )
    db_session.commit()
    refused = client.put(url, json={"base_revision": 0, "code": "x"}, headers={"Authorization": f"Bearer {read_only}"})
    assert refused.status_code == 403 and "'submit' scope" in refused.json()["detail"]
    ok = client.put(url, json={"base_revision": 0, "code": "x"}, headers={"Authorization": f"Bearer {writer}"})
    assert ok.status_code == 200
    assert client.get(url, headers={"Authorization": f"Bearer {read_only}"}).json()["code"] == "x"


def test_the_exercise_page_opens_on_the_newest_of_the_draft_and_the_last_submission(
    learner_client: TestClient, tiny_exercise: TinyExercise, learner: User, db_session: Session
) -> None:
    url = _url(tiny_exercise.slug)
    page = learner_client.get(f"/exercises/{tiny_exercise.slug}").text
    assert 'data-draft-revision="0"' in page and tiny_exercise.starter_marker in page
    learner_client.put(url, json={"base_revision": 0, "code": "# DRAFT-MARKER\n"})
    page = learner_client.get(f"/exercises/{tiny_exercise.slug}").text
    assert "# DRAFT-MARKER" in page and 'data-draft-revision="1"' in page and "is in the editor (not submitted)" in page
    exercise = db_session.get(Exercise, tiny_exercise.exercise.id)
    assert exercise is not None and exercise.current_version_id is not None
    db_session.add(
        Submission(user_id=learner.id, exercise_version_id=exercise.current_version_id, code="# SUBMITTED\n")
    )
    db_session.commit()  # submitted after the draft was saved: the page shows what was submitted
    page = learner_client.get(f"/exercises/{tiny_exercise.slug}").text
    assert "# SUBMITTED" in page and "# DRAFT-MARKER" not in page and 'data-draft-revision="1"' in page
