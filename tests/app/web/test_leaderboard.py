"""The leaderboard page and API: who gets it, what each sees, the links to it and the instructor's switch."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest
from sqlalchemy.orm import Session

from app.domain.courses import membership
from app.domain.models import Assignment, Course, CourseRole, Exercise, Role, User
from tests.app.domain.courses.test_gradebook import add_assignment
from tests.app.domain.courses.test_leaderboard import board_exercise, measured
from tests.app.web.test_pages_courses import form_token

if TYPE_CHECKING:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres

AT = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
MakeUser = Callable[..., User]


@dataclass
class World:
    course: Course
    assignment: Assignment
    exercise: Exercise
    instructor: User
    ta: User
    ada: User
    bob: User
    other_learner: User  # a learner of another course
    outsider: User  # a site instructor with no role in the course

    @property
    def page(self) -> str:
        where = f"/courses/{self.course.slug}/assignments/{self.assignment.id}"
        return f"{where}/exercises/{self.exercise.slug}/leaderboard"

    @property
    def api(self) -> str:
        return f"/api/assignments/{self.assignment.id}/exercises/{self.exercise.slug}/leaderboard"


@pytest.fixture
def world(db_session: Session, make_user: MakeUser) -> World:
    db = db_session
    tag = uuid.uuid4().hex[:8]
    instructor, outsider = make_user(Role.instructor), make_user(Role.instructor)
    ta, ada, bob, other_learner = (make_user(Role.learner) for _ in range(4))
    course = membership.create_course(session=db, slug=f"lb-{tag}", title="Boards", creator=instructor)
    other = membership.create_course(session=db, slug=f"lo-{tag}", title="Elsewhere", creator=outsider)
    membership.enroll(session=db, course=course, user=ta, role=CourseRole.ta)
    for learner in (ada, bob):
        membership.enroll(session=db, course=course, user=learner)
    membership.enroll(session=db, course=other, user=other_learner)
    db.commit()
    exercise = board_exercise(db)
    assignment = add_assignment(db, course, "Week", 0, [(exercise, 1.0)], is_published=True)
    measured(db, assignment, ada, exercise, 1234.5678, AT)
    measured(db, assignment, bob, exercise, 2000.0, AT + timedelta(minutes=5))
    return World(course, assignment, exercise, instructor, ta, ada, bob, other_learner, outsider)


def test_a_learner_sees_pseudonyms_their_own_row_marked_and_no_one_named(
    client: TestClient, login: Callable[..., None], world: World
) -> None:
    login(client, world.ada)
    page = client.get(world.page)
    assert page.status_code == 200
    html = page.text
    board = html.split('id="board"', 1)[1]  # the header names the viewer: the board names no one
    assert world.bob.email not in html and world.ada.email not in board
    assert re.search(r'<tr class="you" aria-current="true">\s*<td class="num">1</td>', html)
    assert ">you</span>" in html and "1,234.57 B" in html  # rounded for people by humane.number
    assert '<time datetime="2026-12-01T09:00:00+00:00"' in html  # the `when` filter
    body = client.get(world.api).json()
    assert body["names"] is False and body["order"] == "lower" and body["label"] == "Bytes"
    assert [(r["rank"], r["you"], r["value"], r["email"], r["name"]) for r in body["rows"]] == [
        (1, True, 1234.5678, None, None), (2, False, 2000.0, None, None),
    ]  # fmt: skip
    assert body["rows"][1]["submission_id"] is None  # bob's submission is not ada's to open
    assert world.bob.email not in str(body)
    assert body["rows"][0]["submitted_at"] == "2026-12-01T09:00:00Z"


@pytest.mark.parametrize("who", ["instructor", "ta"])
def test_the_courses_staff_see_who_is_behind_each_pseudonym(
    client: TestClient, login: Callable[..., None], world: World, who: str
) -> None:
    login(client, getattr(world, who))
    body = client.get(world.api).json()
    assert body["names"] is True
    assert [r["email"] for r in body["rows"]] == [world.ada.email, world.bob.email]
    assert not any(r["you"] for r in body["rows"])
    html = client.get(world.page).text
    assert world.ada.email in html and "you see who is behind each pseudonym" in html


def test_people_outside_the_course_get_not_found(client: TestClient, login: Callable[..., None], world: World) -> None:
    for person in (world.other_learner, world.outsider):
        login(client, person)
        for path in (world.page, world.api):
            response = client.get(path)
            assert response.status_code == 404, (person.email, path)
            assert world.ada.email not in response.text
        client.cookies.clear()


def test_links_show_where_a_board_is_and_the_instructors_switch_hides_it(
    client: TestClient, login: Callable[..., None], world: World, db_session: Session
) -> None:
    login(client, world.ada)
    assignment_page = f"/courses/{world.course.slug}/assignments/{world.assignment.id}"
    assert f'href="{world.page}"' in client.get(assignment_page).text
    assert f'href="{world.page}"' in client.get(f"{assignment_page}/exercises/{world.exercise.slug}").text
    assert client.get(f"/api/assignments/{world.assignment.id}").json()["items"][0]["leaderboard"] == world.page
    client.cookies.clear()

    login(client, world.instructor)
    edit = f"{assignment_page}/edit"
    assert 'name="leaderboard" value="1" checked' in client.get(edit).text
    fields = {
        "csrf_token": form_token(client, edit), "title": "Week", "tz": "UTC", "late_credit_pct": "50",
        "counts": "best", "is_published": "1", "practice": "examples_only", "items": f"{world.exercise.slug} 1\n",
    }  # fmt: skip
    saved = client.post(edit, data=fields, follow_redirects=False)  # the box unticked: not posted
    assert saved.status_code == 303, saved.text
    db_session.refresh(world.assignment)
    assert world.assignment.leaderboard is False
    assert 'name="leaderboard" value="1">' in client.get(edit).text
    client.cookies.clear()

    login(client, world.ada)
    assert f'href="{world.page}"' not in client.get(assignment_page).text
    assert client.get(world.api).status_code == 404 and client.get(world.page).status_code == 404

    client.cookies.clear()
    login(client, world.instructor)
    put = client.put(
        f"/api/assignments/{world.assignment.id}",
        json={"title": "Week", "items": [{"exercise": world.exercise.slug}], "leaderboard": True},
    )
    assert put.status_code == 200 and put.json()["leaderboard"] is True
    assert put.json()["items"][0]["leaderboard"] == world.page


def test_the_schema_documents_the_board_and_its_refusals(app: FastAPI) -> None:
    operation = app.openapi()["paths"]["/api/assignments/{assignment_id}/exercises/{slug}/leaderboard"]["get"]
    assert {"200", "401", "404"} <= set(operation["responses"])
    assert "no leaderboard" in operation["responses"]["404"]["description"]
    ok = operation["responses"]["200"]["content"]["application/json"]["schema"]["$ref"]
    assert ok.endswith("/LeaderboardOut")
