"""The gradebook pages: the staff table with marks, overrides and reverts by form, the audit list, my grades."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.courses import membership
from app.domain.models import Assignment, AssignmentItem, GradeOverride, Submission, SubmissionStatus, User, utcnow
from tests.conftest import TinyExercise
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres

SLUG = "gb-101"
BOOK = f"/courses/{SLUG}/gradebook"


@dataclass
class Graded:
    """A course with one dated assignment and ``learner``'s late, fully passing submission (50 % credit)."""

    item: AssignmentItem
    learner: User


@pytest.fixture
def graded(db_session: Session, instructor: User, learner: User, tiny_exercise: TinyExercise) -> Graded:
    db = db_session
    course = membership.create_course(session=db, slug=SLUG, title="Gradebook 101", creator=instructor)
    membership.enroll(session=db, course=course, user=learner)
    now = utcnow()
    assignment = Assignment(
        course_id=course.id, title="Week 1", position=0, due_at=now - timedelta(days=2),
        late_until=now + timedelta(days=2), late_credit_pct=50.0,
    )  # fmt: skip
    item = AssignmentItem(exercise=tiny_exercise.exercise, position=0, weight=1.0)
    assignment.items.append(item)
    db.add(assignment)
    db.flush()  # the assignment's id, for the submission
    version = tiny_exercise.exercise.current_version
    assert version is not None
    db.add(
        Submission(
            user_id=learner.id, exercise_version_id=version.id, assignment_id=assignment.id, code="pass",
            status=SubmissionStatus.graded, verdict=Verdict.passed, score=5.0, max_score=5.0,
            created_at=now - timedelta(days=1),
        )
    )  # fmt: skip
    db.commit()
    return Graded(item=item, learner=learner)


def token(client: TestClient, path: str = BOOK) -> str:
    match = re.search(r'name="csrf_token" value="([^"]+)"', client.get(path).text)
    assert match, f"{path} has no form token"
    return match.group(1)


def logout(client: TestClient) -> None:
    assert client.post("/api/auth/logout", json={}).status_code == 204


def cell_html(html: str, item: AssignmentItem) -> str:
    match = re.search(rf'<td class="num grade-cell[^"]*" id="cell-{item.id}-1".*?</td>', html, re.S)
    assert match, "no cell"
    return match.group(0)


def test_staff_see_the_table_with_the_late_mark_and_the_csv_link(
    client: TestClient, login: Callable[..., None], instructor: User, graded: Graded
) -> None:
    login(client, instructor)
    page = client.get(BOOK)
    assert page.status_code == 200
    assert "<caption" in page.text and '<th scope="row">' in page.text and 'scope="colgroup"' in page.text
    assert graded.learner.email in page.text
    cell = cell_html(page.text, graded.item)
    assert '<span class="score">50</span>' in cell and 'title="late">L</abbr>' in cell and ">O</abbr>" not in cell
    assert f'href="/api/courses/{SLUG}/gradebook.csv"' in page.text
    csv = client.get(f"/api/courses/{SLUG}/gradebook.csv")
    assert csv.status_code == 200 and "50.0,L" in csv.text
    assert 'id="gradebook-link"' in client.get(f"/courses/{SLUG}").text


def test_a_learner_gets_403_on_the_gradebook_and_sees_their_own_grades(
    client: TestClient, login: Callable[..., None], graded: Graded, other_learner: User
) -> None:
    login(client, graded.learner)
    refused = client.get(BOOK)
    assert refused.status_code == 403 and refused.headers["content-type"].startswith("text/html")
    assert client.post(f"{BOOK}/overrides", data={"csrf_token": token(client, "/courses")}).status_code == 403
    assert 'id="grades-link"' in client.get(f"/courses/{SLUG}").text
    page = client.get(f"/courses/{SLUG}/grades")
    assert page.status_code == 200
    assert "Week 1" in page.text and "50%" in page.text and "mark-late" in page.text
    logout(client)
    login(client, other_learner)
    assert client.get(f"/courses/{SLUG}/grades").status_code == 404  # not a member


def test_an_override_by_form_needs_the_token_and_a_comment_and_reverting_restores_the_score(
    client: TestClient, login: Callable[..., None], instructor: User, graded: Graded, db_session: Session
) -> None:
    login(client, instructor)
    fields = {"item_id": str(graded.item.id), "email": graded.learner.email, "score_pct": "87.5", "comment": "regraded"}
    assert client.post(f"{BOOK}/overrides", data=fields).status_code == 403  # no token
    csrf = token(client)

    refused = client.post(f"{BOOK}/overrides", data={**fields, "comment": "   ", "csrf_token": csrf})
    assert refused.status_code == 422 and "say why" in refused.text and 'id="override-error"' in refused.text
    assert '<details class="override-form" open>' in refused.text  # the cell's form is shown again
    bad = client.post(f"{BOOK}/overrides", data={**fields, "score_pct": "120", "csrf_token": csrf})
    assert bad.status_code == 422 and "from 0 to 100" in bad.text
    assert db_session.scalars(select(GradeOverride)).all() == []

    done = client.post(f"{BOOK}/overrides", data={**fields, "csrf_token": csrf}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == BOOK
    page = client.get(BOOK).text
    assert "set to 87.5" in page  # the flash
    cell = cell_html(page, graded.item)
    assert '<span class="score">87.5</span>' in cell and ">O</abbr>" in cell and "regraded" in cell
    assert 'class="in-force"' in page and "Revert" in page

    logout(client)
    login(client, graded.learner)
    mine = client.get(f"/courses/{SLUG}/grades").text
    assert "87.5%" in mine and "set by staff" in mine and "regraded" in mine
    logout(client)

    login(client, instructor)
    override = db_session.scalars(select(GradeOverride)).one()
    revert = f"{BOOK}/overrides/{override.id}/revert"
    assert client.post(revert, data={}).status_code == 403  # no token
    csrf = token(client)
    assert client.post(revert, data={"csrf_token": csrf}, follow_redirects=False).status_code == 303
    page = client.get(BOOK).text
    assert "reverted" in page and f"by {instructor.email}" in page
    cell = cell_html(page, graded.item)
    assert '<span class="score">50</span>' in cell and ">O</abbr>" not in cell
    assert client.post(f"/courses/practice/gradebook/overrides/{override.id}/revert",
                       data={"csrf_token": csrf}).status_code in (403, 404)  # fmt: skip
