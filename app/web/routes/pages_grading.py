"""Staff grading pages: a grading queue (an exercise's, or the work under an assignment), one answer's form, release.

Contract: an exercise's queue is for instructors and admins (``InstructorDep``) and holds only the work of the
courses they staff (``WorkScopeDep``; its release, of those they instruct); an assignment's for its course's
instructors and TAs (``AssignmentStaffDep``), whose instructors (not TAs) may release it. One grade's page is for
whoever ``app.domain.courses.policy.may_grade`` lets grade it (``GradeDep``); anyone else gets the 404 page. The page
keeps the queue it was opened from
(``queue=a<assignment id>``, or the exercise's), so "save and next" and "skip" stay in it. Forms carry the CSRF
token and answer with a redirect; a refused save (an unknown item, a comment too long: 422; another grader saved
first: 409) shows the form again with the reason and the grader's input kept and, on a conflict, the other
grader's saved grade beside it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from app.domain.courses.policy import WorkScope
from app.domain.models import Assignment, Exercise, ManualGrade, User
from app.domain.platform.markdown import render_markdown
from app.domain.results import staff_grades as sg
from app.domain.review import staff_grading as mg
from app.web.deps import (
    AssignmentStaffDep,
    CurrentUser,
    GradeDep,
    InstructorDep,
    SessionDep,
    StaffExerciseDep,
    WorkScopeDep,
)
from app.web.errors import http_status
from app.web.pages import FORM_CSRF, flash, redirect, render
from worker.core import humane
from worker.core.errors import Conflict, GpulabError, InvalidInput, NotFound

router = APIRouter(include_in_schema=False, dependencies=[FORM_CSRF])
QueueKey = Annotated[str, Query(max_length=16, pattern=r"^(a[0-9]{1,10})?$")]


@dataclass(frozen=True)
class Scope:
    """The queue a grader works through: an exercise's, or the work under one assignment."""

    title: str
    url: str
    key: str  # "" for an exercise's queue, "a<id>" for an assignment's
    crumbs: tuple[tuple[str, str], ...]
    exercise: Exercise | None = None
    assignment: Assignment | None = None


def exercise_scope(exercise: Exercise) -> Scope:
    title = exercise.current_version.title if exercise.current_version else exercise.slug
    url = f"/instructor/exercises/{quote(exercise.slug)}"
    return Scope(title=title, url=f"{url}/grading", key="", exercise=exercise,
                 crumbs=(("Instructor", "/instructor"), (exercise.slug, url)))  # fmt: skip


def assignment_scope(assignment: Assignment) -> Scope:
    course = assignment.course
    url = f"/courses/{quote(course.slug)}/assignments/{assignment.id}"
    return Scope(title=assignment.title, url=f"{url}/grading", key=f"a{assignment.id}", assignment=assignment,
                 crumbs=(("Courses", "/courses"), (course.title, f"/courses/{quote(course.slug)}"),
                         (assignment.title, url)))  # fmt: skip


def _queue_page(
    request: Request, user: User, session: Session, scope: Scope, work: WorkScope, *, can_release: bool
) -> Response:
    rows = mg.queue(session=session, scope=work, exercise=scope.exercise, assignment=scope.assignment)
    counts = mg.counts(session=session, scope=work, exercise=scope.exercise, assignment=scope.assignment)
    return render(request, "instructor/grading.html", user=user, scope=scope, rows=rows, counts=counts,
                  can_release=can_release)  # fmt: skip


def _next(request: Request, session: Session, scope: Scope, work: WorkScope, after: int) -> Response:
    previous = session.get(ManualGrade, after) if 0 < after <= mg.MAX_ID else None
    found = mg.next_ungraded(
        session=session, scope=work, exercise=scope.exercise, assignment=scope.assignment, after=previous
    )
    if found is None and previous is not None:  # wrap around to the ones skipped
        found = mg.next_ungraded(session=session, scope=work, exercise=scope.exercise, assignment=scope.assignment)
    if found is None:
        flash(request, "Nothing left to grade here.")
        return redirect(scope.url)
    return redirect(f"/grading/{found.id}" + (f"?queue={scope.key}" if scope.key else ""))


def _release(request: Request, session: Session, user: User, scope: Scope) -> Response:
    released = mg.release(session=session, user=user, exercise=scope.exercise, assignment=scope.assignment)
    session.commit()
    flash(request, f"Released {released} grade{'' if released == 1 else 's'}: learners now see them." if released
          else "Nothing to release: every graded answer is released already.")  # fmt: skip
    return redirect(scope.url)


def _assignment(access: AssignmentStaffDep, slug: str) -> Assignment:
    if access.course.slug != slug:
        raise NotFound(f"no assignment {access.assignment.id} in the course {slug[:64]!r}")
    return access.assignment


# --- an exercise's queue (instructors and admins) ---------------------------------------------------------------


@router.get("/instructor/exercises/{slug}/grading")
def exercise_queue(
    request: Request, user: InstructorDep, exercise: StaffExerciseDep, work: WorkScopeDep, session: SessionDep
) -> Response:
    return _queue_page(request, user, session, exercise_scope(exercise), work, can_release=True)


@router.get("/instructor/exercises/{slug}/grading/next")
def exercise_next(
    request: Request,
    _user: InstructorDep,
    exercise: StaffExerciseDep,
    work: WorkScopeDep,
    session: SessionDep,
    after: int = 0,
) -> Response:
    return _next(request, session, exercise_scope(exercise), work, after)


@router.post("/instructor/exercises/{slug}/grading/release")
def exercise_release(
    request: Request, user: InstructorDep, exercise: StaffExerciseDep, session: SessionDep
) -> Response:
    return _release(request, session, user, exercise_scope(exercise))


# --- an assignment's queue (its course's instructors and TAs) ---------------------------------------------------


@router.get("/courses/{slug}/assignments/{assignment_id}/grading")
def assignment_queue(
    request: Request, slug: str, access: AssignmentStaffDep, work: WorkScopeDep, session: SessionDep
) -> Response:
    assignment = _assignment(access, slug)
    can_release = mg.may_release(session=session, user=access.user, assignment=assignment)
    return _queue_page(request, access.user, session, assignment_scope(assignment), work, can_release=can_release)


@router.get("/courses/{slug}/assignments/{assignment_id}/grading/next")
def assignment_next(
    request: Request, slug: str, access: AssignmentStaffDep, work: WorkScopeDep, session: SessionDep, after: int = 0
) -> Response:
    return _next(request, session, assignment_scope(_assignment(access, slug)), work, after)


@router.post("/courses/{slug}/assignments/{assignment_id}/grading/release")
def assignment_release(request: Request, slug: str, access: AssignmentStaffDep, session: SessionDep) -> Response:
    return _release(request, session, access.user, assignment_scope(_assignment(access, slug)))


# --- one answer -------------------------------------------------------------------------------------------------


def _line_pairs(numbers: list[str], texts: list[str]) -> list[tuple[int, str]]:
    """Pair the form's line numbers with their comments; a row without a comment is left out."""
    pairs = []
    for number, text in zip(numbers, texts, strict=False):
        if not text.strip():
            continue
        if not number.strip().isdigit() or len(number.strip()) > 7:
            raise InvalidInput(f"give the line of the comment {text.strip()[:40]!r} as a number")
        pairs.append((int(number), text))
    return pairs


def _scope_of(session: Session, grade: ManualGrade, key: str) -> Scope:
    """Return the queue ``key`` names when the grade is in it, else the exercise's."""
    if key.startswith("a") and grade.submission.assignment_id == int(key[1:]):
        assignment = session.get(Assignment, grade.submission.assignment_id)
        if assignment is not None:
            return assignment_scope(assignment)
    exercise = session.get(Exercise, grade.exercise_id)
    assert exercise is not None  # the foreign key cascades
    return exercise_scope(exercise)


def _grade_page(
    request: Request, user: User, session: Session, grade: ManualGrade, key: str, work: WorkScope, *, error: str = "",
    mine: tuple[list[str], str, list[tuple[int, str]]] | None = None, status_code: int = 200,
) -> Response:  # fmt: skip
    exercise = session.get(Exercise, grade.exercise_id)
    assert exercise is not None
    question = sg.rubric_for(exercise, grade.question)
    scope = _scope_of(session, grade, key)
    checked, comment, lines = (
        mine
        if mine is not None
        else (list(grade.checked), grade.comment, [(int(c["line"]), str(c["text"])) for c in grade.line_comments or []])
    )
    return render(
        request, "instructor/grade.html", status_code=status_code, user=user, exercise=exercise, grade=grade,
        question=question, prompt_html=render_markdown(question.prompt), answer=sg.answer_text(grade),
        checked=checked, comment=comment, error=error, conflict=status_code == 409, scope=scope,
        code_lines=sg.answer_text(grade).split("\n") if question.kind == "code" else [],
        line_comments=dict(lines),
        counts=mg.counts(session=session, scope=work, exercise=scope.exercise, assignment=scope.assignment),
    )  # fmt: skip


@router.get("/grading/{grade_id}")
def grade_page(
    request: Request, grade: GradeDep, user: CurrentUser, work: WorkScopeDep, session: SessionDep, queue: QueueKey = ""
) -> Response:
    return _grade_page(request, user, session, grade, queue, work)


@router.post("/grading/{grade_id}")
def save_grade(
    request: Request,
    grade: GradeDep,
    user: CurrentUser,
    work: WorkScopeDep,
    session: SessionDep,
    item: Annotated[list[str] | None, Form(max_length=200)] = None,
    comment: Annotated[str, Form(max_length=mg.MAX_COMMENT_CHARS + 100)] = "",
    revision: Annotated[int, Form(ge=0, le=mg.MAX_ID)] = 0,
    then: Annotated[str, Form(max_length=8)] = "",
    queue: Annotated[str, Form(max_length=16, pattern=r"^(a[0-9]{1,10})?$")] = "",
    line: Annotated[list[str] | None, Form(max_length=mg.MAX_LINE_COMMENTS + 50)] = None,
    line_text: Annotated[list[str] | None, Form(max_length=mg.MAX_LINE_COMMENTS + 50)] = None,
) -> Response:
    grade_id = grade.id
    checked = list(item or [])
    lines: list[tuple[int, str]] = []
    try:
        lines = _line_pairs(line or [], line_text or [])
        mg.save(session=session, grade=grade, user=user, checked=checked, comment=comment, revision=revision,
                line_comments=lines)  # fmt: skip
        session.commit()
    except GpulabError as exc:
        session.rollback()
        grade = mg.get_grade(session=session, grade_id=grade_id, user=user)
        code = 409 if isinstance(exc, Conflict) else http_status(exc)
        return _grade_page(request, user, session, grade, queue, work, error=exc.message,
                           mine=(checked, comment, lines), status_code=code)  # fmt: skip
    flash(request, f"Saved: {humane.number(grade.points or 0)} of {humane.number(grade.max_points)} points.")
    scope = _scope_of(session, grade, queue)
    if then == "next":
        return redirect(f"{scope.url}/next?after={grade.id}")
    return redirect(f"/grading/{grade.id}" + (f"?queue={scope.key}" if scope.key else ""))
