"""Similarity checks over HTTP: who may start and read them, refused input, and a run's pairs and pages."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest
from fastapi import FastAPI
from sqlalchemy.orm import Session

from app.domain.courses import membership
from app.domain.models import Assignment, AssignmentItem, CourseRole, Role, User
from app.domain.review.similarity_runs import run_similarity
from app.web.deps import get_dispatcher_dep
from tests.app.domain.review.test_similarity_runs import COMMENTED, FLAT, RENAMED, STARTER_ONLY_1, _exercise, _submit

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres
XSS = "\n# </pre><script>alert(1)</script><b>bold</b>\n"


@dataclass
class Starter:
    """Records the runs the API handed over instead of comparing them."""

    started: list[int] = field(default_factory=list)

    def start_similarity(self, run_id: int) -> None:
        self.started.append(run_id)


@pytest.fixture
def starter(app: FastAPI) -> Starter:
    recorder = Starter()
    app.dependency_overrides[get_dispatcher_dep] = lambda: recorder
    return recorder


@pytest.fixture
def factory(db_session: Session) -> Callable[[], AbstractContextManager[Session]]:
    @contextmanager
    def shared() -> Iterator[Session]:
        yield db_session

    return shared


@pytest.fixture
def exercise_slug(db_session: Session, make_user: Callable[..., User]) -> str:
    exercise = _exercise(db_session)
    for code in (FLAT + XSS, RENAMED, COMMENTED, STARTER_ONLY_1):
        _submit(db_session, exercise, make_user(Role.learner), code)
    return exercise.slug


def test_learners_may_neither_start_nor_read_checks(
    client: TestClient,
    learner: User,
    instructor: User,
    login: Callable[..., None],
    exercise_slug: str,
    starter: Starter,
) -> None:
    login(client, instructor)
    run_id = client.post(f"/api/instructor/exercises/{exercise_slug}/similarity", json={}).json()["id"]
    client.post("/api/auth/logout")
    login(client, learner)
    assert client.post(f"/api/instructor/exercises/{exercise_slug}/similarity", json={}).status_code == 403
    assert client.get(f"/api/instructor/exercises/{exercise_slug}/similarity").status_code == 403
    answer = client.get(f"/api/similarity/runs/{run_id}")
    assert answer.status_code == 403 and answer.headers["content-type"] == "application/problem+json"
    assert client.get(f"/api/similarity/runs/{run_id}/pairs/1").status_code == 403
    assert client.get(f"/instructor/similarity/{run_id}").status_code == 403
    assert starter.started == [run_id]  # only the instructor's


def test_unknown_and_refused_input(
    client: TestClient, instructor: User, login: Callable[..., None], exercise_slug: str, starter: Starter
) -> None:
    login(client, instructor)
    assert client.post("/api/instructor/exercises/no-such-exercise/similarity", json={}).status_code == 404
    assert client.get("/api/similarity/runs/999999999").status_code == 404
    assert client.get("/api/similarity/runs/0").status_code == 422
    answer = client.post(f"/api/instructor/exercises/{exercise_slug}/similarity", json={"noise_t": 1})
    assert answer.status_code == 422 and answer.json()["type"].endswith("validation-error")
    answer = client.post(
        f"/api/instructor/exercises/{exercise_slug}/similarity", json={"noise_t": 50, "guarantee_t": 40}
    )
    assert answer.status_code == 422 and "guarantee_t" in answer.json()["detail"]
    assert starter.started == []  # nothing refused was started
    run_id = client.post(f"/api/instructor/exercises/{exercise_slug}/similarity", json={}).json()["id"]
    assert client.get(f"/api/similarity/runs/{run_id}/pairs/1").status_code == 404  # queued: no pairs yet


def test_a_started_check_completes_and_lists_its_pairs(
    client: TestClient,
    instructor: User,
    login: Callable[..., None],
    exercise_slug: str,
    starter: Starter,
    factory: Callable[[], AbstractContextManager[Session]],
) -> None:
    login(client, instructor)
    answer = client.post(f"/api/instructor/exercises/{exercise_slug}/similarity", json={"display_t": 0.3})
    assert answer.status_code == 201, answer.text
    queued = answer.json()
    assert queued["status"] == "queued" and queued["params"]["display_t"] == 0.3 and "never" in queued["hint"]
    assert starter.started == [queued["id"]]
    run_similarity(queued["id"], factory=factory)  # what the worker does with the id

    run = client.get(f"/api/similarity/runs/{queued['id']}").json()
    assert run["status"] == "done" and run["submissions"] == 4 and run["pairs_found"] == 3
    assert len(run["clusters"]) == 1 and len(run["clusters"][0]) == 3
    assert [p["rank"] for p in run["pairs"]] == [1, 2, 3]
    assert run["pairs"][0]["score"] >= run["pairs"][2]["score"] > 0.33
    listed = client.get(f"/api/instructor/exercises/{exercise_slug}/similarity").json()
    assert [r["id"] for r in listed] == [queued["id"]]

    pair = client.get(f"/api/similarity/runs/{queued['id']}/pairs/1").json()
    for side in ("a", "b"):
        code, fragments = pair[side]["code"], pair[side]["fragments"]
        assert fragments and all(0 <= start < end <= len(code) for start, end in fragments)
        assert "all_reduce" in "".join(code[start:end] for start, end in fragments)

    page = client.get(f"/instructor/similarity/{queued['id']}")
    assert page.status_code == 200 and "never a verdict or a penalty" in page.text
    assert page.text.count("Side by side") == 3
    sides = [client.get(f"/instructor/similarity/{queued['id']}/pairs/{rank}").text for rank in (1, 2, 3)]
    assert all('<mark class="sim-match">' in html for html in sides)
    with_xss = next(html for html in sides if "alert(1)" in html)
    assert "<script>alert(1)" not in with_xss and "&lt;/pre&gt;&lt;script&gt;alert(1)" in with_xss


def test_the_page_form_starts_a_check_and_lists_it(
    client: TestClient, instructor: User, login: Callable[..., None], exercise_slug: str, starter: Starter
) -> None:
    login(client, instructor)
    page = client.get(f"/instructor/exercises/{exercise_slug}/similarity")
    assert page.status_code == 200 and "No similarity check yet." in page.text
    exercise_page = client.get(f"/instructor/exercises/{exercise_slug}").text
    assert f"/instructor/exercises/{exercise_slug}/similarity" in exercise_page  # linked from the exercise
    match = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert match
    refused = client.post(
        f"/instructor/exercises/{exercise_slug}/similarity",
        data={"csrf_token": match.group(1), "noise_t": "many", "guarantee_t": "35", "display_t": "0.3"},
    )
    assert refused.status_code == 422 and "must be numbers" in refused.text and starter.started == []
    started = client.post(
        f"/instructor/exercises/{exercise_slug}/similarity", data={"csrf_token": match.group(1)}, follow_redirects=False
    )
    assert started.status_code == 303 and started.headers["location"] == f"/instructor/similarity/{starter.started[0]}"
    run_page = client.get(started.headers["location"])
    assert 'data-status="queued"' in run_page.text


def test_course_staff_start_an_assignment_check_and_outsiders_do_not(
    client: TestClient,
    db_session: Session,
    make_user: Callable[..., User],
    instructor: User,
    login: Callable[..., None],
    starter: Starter,
) -> None:
    exercise = _exercise(db_session)
    course = membership.create_course(
        session=db_session, slug=f"sim-{uuid.uuid4().hex[:8]}", title="Similarity", creator=instructor
    )
    assignment = Assignment(course_id=course.id, title="Week 1", position=0)
    assignment.items.append(AssignmentItem(exercise=exercise, position=0, weight=1.0))
    db_session.add(assignment)
    db_session.commit()
    ta, member, outsider = make_user(Role.learner), make_user(Role.learner), make_user(Role.learner)
    membership.enroll(session=db_session, course=course, user=ta, role=CourseRole.ta)
    membership.enroll(session=db_session, course=course, user=member)
    db_session.commit()
    login(client, outsider)
    assert client.post(f"/api/assignments/{assignment.id}/similarity", json={}).status_code == 404
    client.post("/api/auth/logout")
    login(client, member)
    assert client.post(f"/api/assignments/{assignment.id}/similarity", json={}).status_code == 403
    client.post("/api/auth/logout")
    assert client.get(f"/instructor/assignments/{assignment.id}/similarity").status_code == 403
    client.post("/api/auth/logout")
    login(client, ta)
    answer = client.post(f"/api/assignments/{assignment.id}/similarity", json={})
    assert answer.status_code == 201 and answer.json()["assignment_id"] == assignment.id
    assert client.get(f"/api/similarity/runs/{answer.json()['id']}").status_code == 200  # a TA reads it too
    assert [r["id"] for r in client.get(f"/api/assignments/{assignment.id}/similarity").json()] == starter.started

    # The page: linked from the assignment's page for its staff, a form that starts a check, the run's page.
    landing = client.get(f"/courses/{course.slug}/assignments/{assignment.id}").text
    assert f"/instructor/assignments/{assignment.id}/similarity" in landing
    page = client.get(f"/instructor/assignments/{assignment.id}/similarity")
    assert page.status_code == 200 and "Week 1" in page.text and "the submission that counts" in page.text
    match = re.search(r'name="csrf_token" value="([^"]+)"', page.text)
    assert match
    started = client.post(
        f"/instructor/assignments/{assignment.id}/similarity", data={"csrf_token": match.group(1)},
        follow_redirects=False,
    )  # fmt: skip
    assert started.status_code == 303 and len(starter.started) == 2
    run_page = client.get(started.headers["location"])
    assert run_page.status_code == 200 and f"/instructor/assignments/{assignment.id}/similarity" in run_page.text
