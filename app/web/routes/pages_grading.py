"""Staff grading pages: an exercise's grading queue, one answer's grading form, releasing the grades.

Contract: the queue and releasing are for instructors and admins (``InstructorDep``); one grade's page is for
whoever ``manual_grading.may_grade`` (course TAs too, for assignment work; anyone else gets the 404 page). Forms
carry the CSRF token and answer with a redirect; a refused save (an unknown item, a comment too long: 422; another
grader saved first: 409) shows the form again with the reason, the grader's input kept and, on a conflict, the
other grader's saved grade beside it.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from app.domain import manual_grading as mg
from app.domain.markdown import render_markdown
from app.domain.models import Exercise, ManualGrade, User
from app.web.deps import CurrentUser, InstructorDep, RowId, SessionDep, StaffExerciseDep
from app.web.errors import http_status
from app.web.pages import FORM_CSRF, flash, redirect, render
from worker.core.errors import Conflict, GpulabError

router = APIRouter(include_in_schema=False, dependencies=[FORM_CSRF])


def _queue_url(slug: str) -> str:
    return f"/instructor/exercises/{quote(slug)}/grading"


@router.get("/instructor/exercises/{slug}/grading")
def queue_page(request: Request, user: InstructorDep, exercise: StaffExerciseDep, session: SessionDep) -> Response:
    rows = mg.queue(session=session, exercise=exercise)
    counts = mg.counts(session=session, exercise=exercise)
    return render(request, "instructor/grading.html", user=user, exercise=exercise, rows=rows, counts=counts)


@router.get("/instructor/exercises/{slug}/grading/next")
def next_page(
    request: Request, user: InstructorDep, exercise: StaffExerciseDep, session: SessionDep, after: int = 0
) -> Response:
    previous = session.get(ManualGrade, after) if 0 < after <= mg.MAX_ID else None
    if previous is not None and previous.exercise_id != exercise.id:
        previous = None
    found = mg.next_ungraded(session=session, exercise=exercise, after=previous)
    if found is None and previous is not None:  # wrap around to the ones skipped
        found = mg.next_ungraded(session=session, exercise=exercise)
    if found is None:
        flash(request, "Nothing left to grade here.")
        return redirect(_queue_url(exercise.slug))
    return redirect(f"/grading/{found.id}")


def _grade_page(
    request: Request, user: User, session: Session, grade: ManualGrade, *, error: str = "",
    mine: tuple[list[str], str] | None = None, status_code: int = 200,
) -> Response:  # fmt: skip
    exercise = session.get(Exercise, grade.exercise_id)
    assert exercise is not None
    question = mg.question_of(exercise, grade.question)
    checked, comment = mine if mine is not None else (list(grade.checked), grade.comment)
    return render(
        request, "instructor/grade.html", status_code=status_code, user=user, exercise=exercise, grade=grade,
        question=question, prompt_html=render_markdown(question.prompt), answer=mg.answer_text(grade), checked=checked,
        comment=comment, error=error, conflict=status_code == 409,
        counts=mg.counts(session=session, exercise=exercise),
    )  # fmt: skip


@router.get("/grading/{grade_id}")
def grade_page(request: Request, grade_id: RowId, user: CurrentUser, session: SessionDep) -> Response:
    return _grade_page(request, user, session, mg.get_grade(session=session, grade_id=grade_id, user=user))


@router.post("/grading/{grade_id}")
def save_grade(
    request: Request,
    grade_id: RowId,
    user: CurrentUser,
    session: SessionDep,
    item: Annotated[list[str] | None, Form(max_length=200)] = None,
    comment: Annotated[str, Form(max_length=mg.MAX_COMMENT_CHARS + 100)] = "",
    revision: Annotated[int, Form(ge=0, le=mg.MAX_ID)] = 0,
    then: Annotated[str, Form(max_length=8)] = "",
) -> Response:
    grade = mg.get_grade(session=session, grade_id=grade_id, user=user)
    checked = list(item or [])
    try:
        mg.save(session=session, grade=grade, user=user, checked=checked, comment=comment, revision=revision)
        session.commit()
    except GpulabError as exc:
        session.rollback()
        grade = mg.get_grade(session=session, grade_id=grade_id, user=user)
        code = 409 if isinstance(exc, Conflict) else http_status(exc)
        return _grade_page(request, user, session, grade, error=exc.message, mine=(checked, comment), status_code=code)
    flash(request, f"Saved: {grade.points or 0:g} of {grade.max_points:g} points.")
    exercise = session.get(Exercise, grade.exercise_id)
    if then == "next" and exercise is not None:
        return redirect(f"{_queue_url(exercise.slug)}/next?after={grade.id}")
    return redirect(f"/grading/{grade.id}")


@router.post("/instructor/exercises/{slug}/grading/release")
def release(request: Request, user: InstructorDep, exercise: StaffExerciseDep, session: SessionDep) -> Response:
    released = mg.release(session=session, exercise=exercise, user=user)
    session.commit()
    flash(request, f"Released {released} grade{'' if released == 1 else 's'}: learners now see them." if released
          else "Nothing to release: every graded answer is released already.")  # fmt: skip
    return redirect(_queue_url(exercise.slug))
