"""Course pages for everyone enrolled: my courses, a course's assignments as they stand for me, joining by invite
link, and an exercise worked on under an assignment.

Contract:
- Every page needs a login (``CurrentUser``: the log-in redirect otherwise). What a user may not see is the 404
  page, what they may see but not do the 403 page: ``CourseDep`` and ``AssignmentDep`` of ``app.web.deps``
  decide; an assignment named under another course's slug is "not found" too.
- What a learner sees of an assignment is ``app.web.schemas.courses.assignment_out`` (their own dates, the gate's
  sentence per exercise, the score that counts), exactly what ``GET /api/courses/{slug}`` answers; the window is
  ``assignments.window`` of those dates. Dates are ``<time>`` elements shown in the viewer's own time zone.
- An exercise under an assignment is ``/courses/{course}/assignments/{id}/exercises/{slug}``: the exercise page
  (``exercise.html`` through ``courses/exercise.html``) with the gate's sentence above Submit; ``exercise.js``
  sends the assignment id (the form's ``data-assignment``) with the submission and shows a refusal's detail.
  Without JavaScript the form posts here and passes the same gate (``SubmitDep``).
- ``.../exercises/{slug}/leaderboard`` is the exercise's board under the assignment when it has one
  (``app.domain.courses.leaderboard``: "not found" otherwise), linked from the assignment's card and the exercise's
  result; learners see pseudonyms, the course's staff names too.
- Every POST is a form with the session's CSRF token (``FORM_CSRF``); success flashes and redirects. Routes
  commit; nothing here grades.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import Response
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.courses import assignments, coursework, drafts, leaderboard, membership, timing
from app.domain.models import Assignment, Course, CourseRole, User, utcnow
from app.domain.platform.highlight import highlight_blocks
from app.domain.review.insights import exercise_insights
from app.domain.submissions.progress import progress_for
from app.web.deps import (
    CourseAccess,
    CourseDep,
    CurrentUser,
    ExerciseDep,
    SessionDep,
    SubmitDep,
    WorkScopeDep,
)
from app.web.pages import FORM_CSRF, flash, redirect, render
from app.web.routes.course_forms import HereDep, HereStaffDep, assignment_url, course_url, item_of
from app.web.routes.pages import exercise_context
from app.web.schemas.courses import AssignmentOut, TimedAttemptOut, assignment_out, board_path
from app.web.schemas.exercises import ExerciseDetail
from app.web.sessions import client_ip
from worker.core.errors import GpulabError, NotFound

router = APIRouter(include_in_schema=False, dependencies=[FORM_CSRF])

# --- learners: my courses, a course, joining -----------------------------------------------------------------


@dataclass(frozen=True)
class AssignmentView:
    """One assignment on the course page: as ``assignment_out`` describes it, its window now, my grade."""

    out: AssignmentOut
    window: assignments.Window
    grade_pct: float | None = None  # learners only


def _assignment_view(session: Session, assignment: Assignment, access: CourseAccess, now: datetime) -> AssignmentView:
    out = assignment_out(session=session, assignment=assignment, user=access.user, staff=access.is_staff)
    where = assignments.window(assignments.Dates(out.opens_at, out.due_at, out.late_until, None), now)
    grade = None if access.is_staff else assignments.assignment_pct(
        session=session, assignment=assignment, user=access.user
    )  # fmt: skip
    return AssignmentView(out=out, window=where, grade_pct=grade)


def _courses_page(
    request: Request, session: Session, user: User, status_code: int = 200, **extra: Any
) -> Response:  # fmt: skip
    context: dict[str, Any] = {"error": "", "new_slug": "", "new_title": "", "archived": False, **extra}
    mine = membership.courses_of(session=session, user=user, archived=context["archived"])
    shelved = len(membership.courses_of(session=session, user=user, archived=True)) if not context["archived"] else 0
    return render(request, "courses/index.html", status_code=status_code, courses=mine, shelved=shelved, **context)


@router.get("/courses")
def courses_page(
    request: Request, user: CurrentUser, session: SessionDep, archived: Annotated[bool, Query()] = False
) -> Response:
    """List my courses; ``?archived=1``: the archived ones (left out of the default view)."""
    return _courses_page(request, session, user, archived=archived)


@router.post("/courses")
def create_course(
    request: Request,
    user: CurrentUser,
    session: SessionDep,
    slug: Annotated[str, Form(max_length=200)] = "",
    title: Annotated[str, Form(max_length=1000)] = "",
) -> Response:
    """Create a course (site instructors and admins); its creator becomes its instructor."""
    try:
        course = membership.create_course(session=session, slug=slug.strip(), title=title, creator=user)
        session.commit()
    except GpulabError as exc:
        session.rollback()
        return _courses_page(request, session, user, 422, error=exc.message, new_slug=slug, new_title=title)
    flash(request, f"Course {course.title!r} created: enroll learners and add assignments here.")
    return redirect(f"{course_url(course)}/manage")


@router.get("/courses/{slug}")
def course_page(request: Request, access: CourseDep, session: SessionDep) -> Response:
    now = utcnow()
    listed = membership.visible_assignments(session=session, course=access.course, user=access.user)
    views = [_assignment_view(session, assignment, access, now) for assignment in listed]
    return render(request, "courses/course.html", course=access.course, role=access.role, staff=access.is_staff,
                  assignments=views)  # fmt: skip


def _invited(session: Session, token: str) -> Course:
    found = (
        session.scalar(select(Course).where(Course.invite_token == token))
        if membership.TOKEN_RE.fullmatch(token)
        else None
    )
    if found is None:
        raise NotFound("this invite link is unknown or no longer valid; ask for a new one")
    return found


@router.get("/join/{token}")
def join_page(request: Request, token: str, user: CurrentUser, session: SessionDep) -> Response:
    course = _invited(session, token)
    role = membership.course_role(session=session, course=course, user=user)
    return render(request, "courses/join.html", course=course, role=role, token=token)


@router.post("/join/{token}")
def join_form(request: Request, token: str, user: CurrentUser, session: SessionDep) -> Response:
    course = membership.join_by_invite(session=session, token=token, user=user)
    session.commit()
    flash(request, f"Welcome to {course.title}.")
    return redirect(course_url(course))


# ``:int``: "/courses/{slug}/assignments/new" (a staff page) is not an assignment id, whatever the route order.
@router.get("/courses/{course_slug}/assignments/{assignment_id:int}")
def assignment_page(request: Request, here: HereDep, session: SessionDep) -> Response:
    """Show one assignment as the course page shows it: where an LMS link to it lands."""
    now = utcnow()
    timing.lockout(session=session, user=here.user, assignment_id=here.assignment.id, now=now)
    view = _assignment_view(session, here.assignment, here, now)
    return render(request, "courses/assignment.html", course=here.course, role=here.role, staff=here.is_staff, v=view)


@router.post("/courses/{course_slug}/assignments/{assignment_id:int}/start")
def start_timed_form(
    request: Request, here: HereDep, session: SessionDep, access_code: Annotated[str, Form(max_length=200)] = ""
) -> Response:
    """Start my clock on a timed assignment, from its page; a refusal (wrong code, network) is flashed there."""
    try:
        coursework.start_timed(
            session=session, assignment=here.assignment, user=here.user, access_code=access_code,
            client_ip=client_ip(request), now=utcnow(),
        )  # fmt: skip
        session.commit()
    except GpulabError as exc:
        session.rollback()
        flash(request, f"Not started: {exc.message}.")
        return redirect(assignment_url(here.assignment))
    flash(request, "Started: your time runs. Your work is saved as you type; submit each exercise when it is ready.")
    return redirect(assignment_url(here.assignment))


# --- an exercise under an assignment -------------------------------------------------------------------------


@router.get("/courses/{course_slug}/assignments/{assignment_id}/exercises/{slug}")
def assignment_exercise_page(
    request: Request, here: HereDep, exercise: ExerciseDep, user: CurrentUser, session: SessionDep
) -> Response:
    assignment = here.assignment
    item = item_of(assignment, exercise)
    params = coursework.learner_params(
        session=session, exercise=exercise, user=user, assignment_id=assignment.id, practice=False
    )
    detail = ExerciseDetail.of(exercise, params=params)
    learner = here.role is CourseRole.learner
    now = utcnow()
    timing.lockout(session=session, user=user, assignment_id=assignment.id, now=now)
    dates = assignments.effective_dates(session=session, assignment=assignment, user=user)
    gate = counted = timed = None
    if learner and timing.is_timed(assignment):
        attempt = timing.attempt_of(session=session, assignment=assignment, user=user)
        if attempt is None:  # a timed assignment's exercises show once the learner's clock runs
            flash(request, "Start the timed assignment first: its exercises show once your time runs.")
            return redirect(assignment_url(assignment))
        timed = TimedAttemptOut.of(attempt, now=now)
    if learner:
        gate = assignments.gate(session=session, assignment=assignment, exercise=exercise, user=user, now=now)
        counted = assignments.counted(session=session, assignment=assignment, item=item, user=user, dates=dates)
    board = board_path(assignment, exercise.slug) if leaderboard.board_for(assignment, exercise) else None
    under: dict[str, Any] = {
        "assignment": assignment, "course": here.course, "learner": learner, "gate": gate, "counted": counted,
        "dates": dates, "assignment_url": assignment_url(assignment), "board_url": board, "timed": timed,
    }  # fmt: skip
    if detail.kind == "quiz":  # answered through quiz.js, which sends the assignment id
        prompt = highlight_blocks(detail.prompt_html)
        progress = progress_for(session=session, user=user, exercise=exercise)
        draft = drafts.find(session=session, exercise=exercise, user=user, assignment=assignment)
        return render(request, "courses/quiz.html", ex=detail, prompt=prompt, progress=progress, draft=draft, **under)
    page = exercise_context(session=session, user=user, exercise=exercise, detail=detail, assignment=assignment)
    return render(request, "courses/exercise.html", **page, **under)


@router.get("/courses/{course_slug}/assignments/{assignment_id}/exercises/{slug}/leaderboard")
def assignment_leaderboard_page(
    request: Request, here: HereDep, exercise: ExerciseDep, session: SessionDep
) -> Response:  # fmt: skip
    """Show the exercise's leaderboard under the assignment (course members; names for its staff)."""
    board = leaderboard.leaderboard(session=session, assignment=here.assignment, exercise=exercise, viewer=here.user)
    return render(
        request, "courses/leaderboard.html", board=board, course=here.course, role=here.role,
        assignment_url=assignment_url(here.assignment),
        exercise_url=f"{assignment_url(here.assignment)}/exercises/{quote(exercise.slug)}",
    )  # fmt: skip


@router.post("/courses/{course_slug}/assignments/{assignment_id}/exercises/{slug}/submissions")
def submit_under_assignment(
    here: HereDep, exercise: ExerciseDep, user: CurrentUser, submit: SubmitDep, code: Annotated[str, Form()] = ""
) -> Response:  # fmt: skip
    """Submit without JavaScript under the assignment (its gate refuses with the error page); show the attempt."""
    item_of(here.assignment, exercise)
    submission = submit(user=user, exercise=exercise, code=code, assignment_id=here.assignment.id)
    history = f"/exercises/{quote(exercise.slug)}/history"
    return redirect(f"{history}?attempt={submission.id}&assignment={here.assignment.id}#attempt")


@router.get("/courses/{course_slug}/assignments/{assignment_id}/exercises/{slug}/insights")
def assignment_insights_page(
    request: Request, here: HereStaffDep, exercise: ExerciseDep, work: WorkScopeDep, session: SessionDep
) -> Response:  # fmt: skip
    """Show what the course's learners get wrong on one exercise: any of its staff, TAs included, read-only."""
    item_of(here.assignment, exercise)
    found = exercise_insights(session=session, exercise=exercise, scope=work, course=here.course)
    scope = {"course": here.course, "assignment": here.assignment, "url": assignment_url(here.assignment)}
    return render(request, "instructor/insights.html", exercise=exercise, ins=found, scope=scope)
