"""Gradebook pages: the staff gradebook of a course (learners x items, marks, overrides, audit list) and a member's
own grades.

Contract:
- ``/courses/{slug}/gradebook`` is for the course's staff (``CourseStaffDep``: a learner gets the 403 page, an
  outsider the 404 page): ``app.domain.courses.gradebook.gradebook`` as a table with a ``<details>`` override form per
  cell, the CSV link (``/api/courses/{slug}/gradebook.csv``) and ``override_history`` as the audit list, with a
  Revert form on each override in force, and the scores of this course still owed to its LMS gradebook
  (``app.domain.lti.scores.outbox``: pending or failing, attempts, last error, next try), when there are any.
- ``/courses/{slug}/grades`` is any member's own row (``gradebook.my_grades``) as a list.
- Every POST is a form with the session's CSRF token (``FORM_CSRF``). Success flashes and redirects; refused input
  shows the gradebook again (422) with the message and the cell's form open with what was typed, and writes
  nothing. An override named under another course's slug is "not found".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Request
from fastapi.responses import Response
from sqlalchemy import select
from sqlalchemy.orm import Session, joinedload

from app.domain.accounts import people
from app.domain.courses import gradebook
from app.domain.lti import scores
from app.domain.models import AssignmentItem, Exercise, ExerciseVersion, User
from app.domain.results import settle
from app.web.deps import CourseAccess, CourseDep, CourseStaffDep, RowId, SessionDep
from app.web.pages import FORM_CSRF, flash, redirect, render
from worker.core import humane
from worker.core.errors import InvalidInput, NotFound

router = APIRouter(include_in_schema=False, dependencies=[FORM_CSRF])

TextField = Annotated[str, Form(max_length=10_000)]


@dataclass
class OverrideForm:
    """An override form as typed, kept to show it again after a refusal."""

    item_id: str = ""
    email: str = ""
    score_pct: str = ""
    comment: str = ""

    def score(self) -> float:
        try:
            value = float(self.score_pct.strip())
        except ValueError:
            raise InvalidInput("the score must be a percentage from 0 to 100") from None
        if not math.isfinite(value):
            raise InvalidInput("the score must be a percentage from 0 to 100")
        return value

    def item(self) -> int:
        text = self.item_id.strip()
        if not text.isdigit() or not 0 < int(text) <= gradebook.MAX_ID:
            raise NotFound("no such item in this course")
        return int(text)


@dataclass(frozen=True)
class GradeLine:
    """One line of a learner's own grades: the assignment, the exercise and the cell."""

    assignment_id: int
    assignment: str
    exercise: str  # the exercise's title
    url: str  # the exercise under its assignment
    cell: gradebook.Cell


def _url(access: CourseAccess) -> str:
    return f"/courses/{quote(access.course.slug)}/gradebook"


def _page(
    request: Request, session: Session, access: CourseAccess, form: OverrideForm | None = None, *, error: str = "",
    status_code: int = 200,
) -> Response:  # fmt: skip
    book = gradebook.gradebook(session=session, course=access.course, viewer=access.user)
    history = gradebook.override_history(session=session, course=access.course, viewer=access.user)
    owed = scores.outbox(session=session, course_id=access.course.id)
    emails = people.emails_of(session=session, ids={r.user_id for r in owed})
    return render(
        request, "gradebook/gradebook.html", status_code=status_code, course=access.course, book=book,
        history=history, form=form or OverrideForm(), error=error, base_url=_url(access), owed=owed, emails=emails,
    )  # fmt: skip


@router.get("/courses/{slug}/gradebook")
def gradebook_page(request: Request, access: CourseStaffDep, session: SessionDep) -> Response:
    return _page(request, session, access)


@router.post("/courses/{slug}/gradebook/overrides")
def override_form(
    request: Request,
    access: CourseStaffDep,
    session: SessionDep,
    item_id: TextField = "",
    email: TextField = "",
    score_pct: TextField = "",
    comment: TextField = "",
) -> Response:
    form = OverrideForm(item_id=item_id, email=email, score_pct=score_pct, comment=comment)
    try:
        item = session.get(AssignmentItem, form.item())
        learner = session.scalar(select(User).where(User.email == form.email.strip().lower()))
        if item is None or learner is None:
            raise NotFound("no such item or learner in this course")
        settle.override(
            session=session, course=access.course, item=item, learner=learner, score_pct=form.score(),
            comment=form.comment, actor=access.user,
        )  # fmt: skip
        session.commit()
    except InvalidInput as exc:
        session.rollback()
        return _page(request, session, access, form, error=exc.message, status_code=422)
    flash(request, f"Score of {learner.email} on {item.exercise.slug} set to {humane.number(form.score(), 1)}%.")
    return redirect(_url(access))


@router.post("/courses/{slug}/gradebook/overrides/{override_id}/revert")
def revert_form(request: Request, access: CourseStaffDep, session: SessionDep, override_id: RowId) -> Response:
    history = gradebook.override_history(session=session, course=access.course, viewer=access.user)
    entry = next((e for e in history if e.id == override_id), None)
    if entry is None:
        raise NotFound(f"no grade override {override_id} in this course")
    settle.revert_override(session=session, override_id=override_id, actor=access.user)
    session.commit()
    done = f"Override of {entry.learner} on {entry.exercise} reverted."
    flash(request, "It was already reverted." if entry.reverted else done)
    return redirect(_url(access))


@router.get("/courses/{slug}/grades")
def my_grades_page(request: Request, access: CourseDep, session: SessionDep) -> Response:
    row = gradebook.my_grades(session=session, course=access.course, user=access.user)
    ids = [cell.item_id for cell in row.cells]
    stmt = (
        select(AssignmentItem)
        .where(AssignmentItem.id.in_(ids))
        .options(
            joinedload(AssignmentItem.assignment),
            joinedload(AssignmentItem.exercise).joinedload(Exercise.current_version).load_only(ExerciseVersion.title),
        )
    )
    items = {item.id: item for item in session.scalars(stmt)} if ids else {}
    lines = []
    for cell in row.cells:
        item = items[cell.item_id]
        exercise = item.exercise
        title = exercise.current_version.title if exercise.current_version is not None else exercise.slug
        url = f"/courses/{quote(access.course.slug)}/assignments/{item.assignment_id}/exercises/{quote(exercise.slug)}"
        lines.append(GradeLine(item.assignment_id, item.assignment.title, title, url, cell))
    return render(request, "gradebook/grades.html", course=access.course, row=row, lines=lines)
