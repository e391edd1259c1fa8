"""Course pages: my courses, a course's assignments as they stand for me, joining by invite link, an exercise
worked on under an assignment, and the staff pages (members and CSV enrollment, the invite link, assignments and
their extensions, the roster sync from the LMS).

Contract:
- Every page needs a login (``CurrentUser``: the log-in redirect otherwise). What a user may not see is the 404
  page, what they may see but not do the 403 page: ``CourseDep``/``CourseStaffDep`` and
  ``AssignmentDep``/``AssignmentStaffDep`` of ``app.web.deps`` decide; an assignment named under another
  course's slug is "not found" too. Staff pages are for the course's instructors and TAs (admins count as
  instructors); creating and editing assignments and the invite link are the instructors' (the domain's
  ``Forbidden`` for a TA), extensions any staff's.
- What a learner sees of an assignment is ``api_courses.assignment_out`` (their own dates, the gate's sentence
  per exercise, the score that counts), exactly what ``GET /api/courses/{slug}`` answers; the window is
  ``assignments.window`` of those dates. Dates are ``<time datetime="…UTC ISO…" data-format="long">`` elements
  whose UTC text ``app.js`` replaces with the viewer's own time zone.
- An exercise under an assignment is ``/courses/{course}/assignments/{id}/exercises/{slug}``: the exercise page
  (``exercise.html`` through ``courses/exercise.html``) with the gate's sentence above Submit; ``exercise.js``
  sends the assignment id (the form's ``data-assignment``) with the submission and shows a refusal's detail.
  Without JavaScript the form posts here and passes the same gate (``coursework.gate_submission``).
- Date inputs: a form's dates are ``datetime-local`` values (a wall-clock time without an offset) read in the
  form's ``tz`` (an IANA zone; "UTC" always works, other zones need the system's time-zone data) and stored in
  UTC (``utc_from_local``). A wall-clock time that a daylight-saving change repeats is its first occurrence
  (fold 0); one that the change skips is read with the offset before it (02:30 on a spring-forward night is
  stored as 03:30 of the new offset). A fresh form comes with UTC values and zone; ``courses.js`` then selects
  the browser's zone (when offered) and rewrites the values into it, so what is shown is what is sent. A form
  shown again after a refusal keeps the zone and the values as typed.
- Every POST is a form with the session's CSRF token (``FORM_CSRF``). Success flashes and redirects
  (POST-redirect-GET); refused input shows the same form again (422) with the message and the input kept, and
  writes nothing. CSV enrollment answers with its per-row report on the page (one-time passwords are shown
  once, never kept in a cookie or a URL); so does the roster sync (``app.domain.lti.roster``: shown when the
  course has an LMS context offering its roster; a platform that fails is the manage page again, 422, with the
  reason, and nothing enrolled). Routes commit; nothing here grades.
"""

from __future__ import annotations

import re
import zoneinfo
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from fastapi.responses import Response
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain import accounts, assignments, courses, coursework
from app.domain.exercises import list_published
from app.domain.highlight import highlight_blocks
from app.domain.insights import exercise_insights
from app.domain.lti import roster
from app.domain.models import Assignment, AssignmentItem, Course, CourseRole, Exercise, User, utcnow
from app.domain.progress import progress_for
from app.domain.schemas import as_utc
from app.web.deps import (
    AssignmentAccess,
    AssignmentDep,
    AssignmentStaffDep,
    CourseAccess,
    CourseDep,
    CourseStaffDep,
    CurrentUser,
    ExerciseDep,
    ExtensionDep,
    SessionDep,
    SubmitDep,
)
from app.web.pages import FORM_CSRF, flash, redirect, render
from app.web.routes.api_courses import AssignmentIn, AssignmentOut, ExtensionIn, ExtensionOut, assignment_out
from app.web.routes.api_roster import RosterHttpDep
from app.web.routes.pages import exercise_context
from worker.core.errors import GpulabError, InvalidInput, NotFound

router = APIRouter(include_in_schema=False, dependencies=[FORM_CSRF])

_ZONE_DATA = {z for z in zoneinfo.available_timezones() if not z.startswith(("posix/", "right/"))}
ZONES = ("UTC", *sorted(z for z in _ZONE_DATA if "/" in z and not z.startswith("Etc/")))  # what the select offers
LOCAL_FORMAT = "%Y-%m-%dT%H:%M"  # a datetime-local input's value
LABELS = {
    "title": "the title", "opens_at": "the opening date", "due_at": "the due date", "late_until": "the late end",
    "late_credit_pct": "the late credit", "counts": "which attempt counts", "max_attempts": "the attempt limit",
    "rate_burst": "the submissions in a burst", "rate_refill_s": "the refill time", "email": "the learner",
    "extra_attempts": "the extra attempts", "reason": "the reason", "practice": "practice",
}  # fmt: skip


# --- dates in a time zone ------------------------------------------------------------------------------------


def _zone(name: str) -> tzinfo:
    if name == "UTC":
        return UTC  # without the system's zone data too
    if name not in _ZONE_DATA:
        raise InvalidInput(f"unknown time zone {name[:60]!r}")
    return zoneinfo.ZoneInfo(name)


def utc_from_local(value: str, zone: str, what: str) -> datetime | None:
    """Read a ``datetime-local`` value as a wall-clock time in ``zone``; return it in UTC (None: left empty)."""
    text = value.strip()
    if not text:
        return None
    try:
        local = datetime.fromisoformat(text)
    except ValueError as exc:
        raise InvalidInput(f"{what} must be a date and time like 2026-12-08T17:00, not {text[:40]!r}") from exc
    try:
        return (local if local.tzinfo else local.replace(tzinfo=_zone(zone))).astimezone(UTC)
    except (OverflowError, ValueError) as exc:  # year 1 or 9999 pushed past the calendar by the offset
        raise InvalidInput(f"{what} is out of range") from exc


def local_value(value: datetime | None) -> str:
    """Return ``value`` as a ``datetime-local`` value in UTC ("" for none): what a fresh form starts with."""
    return as_utc(value).strftime(LOCAL_FORMAT) if value else ""


def _refused(exc: ValidationError) -> InvalidInput:
    """Say in a sentence what the first field error of ``exc`` is."""
    error = exc.errors()[0]
    loc = [str(part) for part in error["loc"]]
    if loc[:1] == ["items"] and len(loc) > 1 and loc[1].isdigit():
        where = f"exercise {int(loc[1]) + 1}"
    else:
        where = LABELS.get(loc[0], loc[0]) if loc else "the form"
    return InvalidInput(f"{where}: {error['msg'][:200]}")


def _optional(text: str) -> str | None:
    return text.strip() or None


# --- forms as typed ------------------------------------------------------------------------------------------


@dataclass
class AssignmentForm:
    """An assignment form as typed (strings, dates in ``tz``), kept to show it again after a refusal."""

    title: str = ""
    opens_at: str = ""
    due_at: str = ""
    late_until: str = ""
    tz: str = "UTC"
    late_credit_pct: str = "50"
    counts: str = "best"
    max_attempts: str = ""
    rate_burst: str = ""
    rate_refill_s: str = ""
    is_published: bool = True
    practice: str = "examples_only"
    items: str = ""  # one exercise a line: "slug [weight]"

    @classmethod
    def of(cls, assignment: Assignment) -> AssignmentForm:
        def text(value: float | None) -> str:
            return "" if value is None else f"{value:g}"

        return cls(
            title=assignment.title, opens_at=local_value(assignment.opens_at), due_at=local_value(assignment.due_at),
            late_until=local_value(assignment.late_until), tz="UTC", late_credit_pct=text(assignment.late_credit_pct),
            counts=assignment.counts, max_attempts=text(assignment.max_attempts),
            rate_burst=text(assignment.rate_burst), rate_refill_s=text(assignment.rate_refill_s),
            is_published=assignment.is_published, practice=assignment.practice,
            items="\n".join(f"{item.exercise.slug} {item.weight:g}" for item in assignment.items),
        )  # fmt: skip

    def chosen(self) -> list[dict[str, str]]:
        """Return the exercise lines as ``{"exercise", "weight"}`` (the weight 1 when left out)."""
        found = []
        for number, line in enumerate(self.items.splitlines(), start=1):
            parts = [p for p in re.split(r"[\s,;]+", line.strip()) if p]
            if not parts:
                continue
            if len(parts) > 2:
                raise InvalidInput(f"exercise line {number}: write the exercise's slug, then its weight if not 1")
            found.append({"exercise": parts[0], "weight": parts[1] if len(parts) == 2 else "1"})
        return found

    def checked(self) -> AssignmentIn:
        """Return the form as the API's ``AssignmentIn`` (dates in UTC), or raise ``InvalidInput``."""
        when = {
            name: utc_from_local(getattr(self, name), self.tz, LABELS[name])
            for name in ("opens_at", "due_at", "late_until")
        }
        try:
            return AssignmentIn.model_validate(
                {
                    "title": self.title,
                    **when,
                    "counts": self.counts,
                    "max_attempts": _optional(self.max_attempts),
                    "rate_burst": _optional(self.rate_burst),
                    "rate_refill_s": _optional(self.rate_refill_s),
                    "is_published": self.is_published,
                    "practice": self.practice,
                    "items": self.chosen(),
                    **({"late_credit_pct": self.late_credit_pct.strip()} if self.late_credit_pct.strip() else {}),
                }
            )
        except ValidationError as exc:
            raise _refused(exc) from exc


@dataclass
class ExtensionForm:
    """An extension form as typed (dates in ``tz``)."""

    email: str = ""
    due_at: str = ""
    late_until: str = ""
    tz: str = "UTC"
    extra_attempts: str = "0"
    reason: str = ""
    no_late: bool = False

    def checked(self, late_span: timedelta | None = None) -> ExtensionIn:
        """Return the form as the API's ``ExtensionIn`` (dates in UTC), or raise ``InvalidInput``.

        ``late_span``: the assignment's late period; a late end left empty (and "no late period" unticked) ends
        that long after the new due date, so moving only the due date keeps the learner's late period.
        """
        due_at = utc_from_local(self.due_at, self.tz, LABELS["due_at"])
        if due_at is None:
            raise InvalidInput("an extension needs its new due date")
        late_until = utc_from_local(self.late_until, self.tz, LABELS["late_until"])
        if late_until is None and late_span is not None and not self.no_late:
            late_until = due_at + late_span
        try:
            return ExtensionIn.model_validate(
                {
                    "email": self.email,
                    "due_at": due_at,
                    "late_until": late_until,
                    "extra_attempts": self.extra_attempts.strip() or "0",
                    "reason": self.reason,
                }
            )
        except ValidationError as exc:
            raise _refused(exc) from exc


# --- loading -------------------------------------------------------------------------------------------------


def _here(course_slug: str, access: AssignmentAccess) -> AssignmentAccess:
    if access.course.slug != course_slug:  # an assignment of another course: not here
        raise NotFound(f"no assignment {access.assignment.id} in {course_slug[:80]!r}")
    return access


def get_here(course_slug: str, access: AssignmentDep) -> AssignmentAccess:
    return _here(course_slug, access)


def get_staff_here(course_slug: str, access: AssignmentStaffDep) -> AssignmentAccess:
    return _here(course_slug, access)


HereDep = Annotated[AssignmentAccess, Depends(get_here)]
HereStaffDep = Annotated[AssignmentAccess, Depends(get_staff_here)]


def _item_of(assignment: Assignment, exercise: Exercise) -> AssignmentItem:
    for item in assignment.items:
        if item.exercise_id == exercise.id:
            return item
    raise NotFound(f"exercise {exercise.slug!r} is not part of {assignment.title!r}")


def _course_url(course: Course) -> str:
    return f"/courses/{quote(course.slug)}"


def _assignment_url(assignment: Assignment) -> str:
    return f"/courses/{quote(assignment.course.slug)}/assignments/{assignment.id}"


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
    context: dict[str, Any] = {"error": "", "new_slug": "", "new_title": "", **extra}
    mine = courses.courses_of(session=session, user=user)
    return render(request, "courses/index.html", status_code=status_code, courses=mine, **context)


@router.get("/courses")
def courses_page(request: Request, user: CurrentUser, session: SessionDep) -> Response:
    return _courses_page(request, session, user)


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
        course = courses.create_course(session=session, slug=slug.strip(), title=title, creator=user)
        session.commit()
    except GpulabError as exc:
        session.rollback()
        return _courses_page(request, session, user, 422, error=exc.message, new_slug=slug, new_title=title)
    flash(request, f"Course {course.title!r} created: enroll learners and add assignments here.")
    return redirect(f"{_course_url(course)}/manage")


@router.get("/courses/{slug}")
def course_page(request: Request, access: CourseDep, session: SessionDep) -> Response:
    now = utcnow()
    listed = courses.visible_assignments(session=session, course=access.course, user=access.user)
    views = [_assignment_view(session, assignment, access, now) for assignment in listed]
    return render(request, "courses/course.html", course=access.course, role=access.role, staff=access.is_staff,
                  assignments=views)  # fmt: skip


def _invited(session: Session, token: str) -> Course:
    found = (
        session.scalar(select(Course).where(Course.invite_token == token))
        if courses.TOKEN_RE.fullmatch(token)
        else None
    )
    if found is None:
        raise NotFound("this invite link is unknown or no longer valid; ask for a new one")
    return found


@router.get("/join/{token}")
def join_page(request: Request, token: str, user: CurrentUser, session: SessionDep) -> Response:
    course = _invited(session, token)
    role = courses.course_role(session=session, course=course, user=user)
    return render(request, "courses/join.html", course=course, role=role, token=token)


@router.post("/join/{token}")
def join_form(request: Request, token: str, user: CurrentUser, session: SessionDep) -> Response:
    course = courses.join_by_invite(session=session, token=token, user=user)
    session.commit()
    flash(request, f"Welcome to {course.title}.")
    return redirect(_course_url(course))


# ``:int``: "/courses/{slug}/assignments/new" (a staff page) is not an assignment id, whatever the route order.
@router.get("/courses/{course_slug}/assignments/{assignment_id:int}")
def assignment_page(request: Request, here: HereDep, session: SessionDep) -> Response:
    """Show one assignment as the course page shows it: where an LMS link to it lands."""
    view = _assignment_view(session, here.assignment, here, utcnow())
    return render(request, "courses/assignment.html", course=here.course, role=here.role, staff=here.is_staff, v=view)


# --- an exercise under an assignment -------------------------------------------------------------------------


@router.get("/courses/{course_slug}/assignments/{assignment_id}/exercises/{slug}")
def assignment_exercise_page(
    request: Request, here: HereDep, exercise: ExerciseDep, user: CurrentUser, session: SessionDep
) -> Response:
    assignment = here.assignment
    item = _item_of(assignment, exercise)
    detail = coursework.learner_detail(
        session=session, exercise=exercise, user=user, assignment_id=assignment.id, practice=False
    )
    learner = here.role is CourseRole.learner
    dates = assignments.effective_dates(session=session, assignment=assignment, user=user)
    gate = counted = None
    if learner:
        gate = assignments.gate(session=session, assignment=assignment, exercise=exercise, user=user, now=utcnow())
        counted = assignments.counted(session=session, assignment=assignment, item=item, user=user, dates=dates)
    under: dict[str, Any] = {
        "assignment": assignment, "course": here.course, "learner": learner, "gate": gate, "counted": counted,
        "dates": dates, "assignment_url": _assignment_url(assignment),
    }  # fmt: skip
    if detail.kind == "quiz":  # answered through quiz.js, which sends the assignment id
        prompt = highlight_blocks(detail.prompt_html)
        progress = progress_for(session=session, user=user, exercise=exercise)
        return render(request, "courses/quiz.html", ex=detail, prompt=prompt, progress=progress, **under)
    page = exercise_context(session=session, user=user, exercise=exercise, detail=detail)
    return render(request, "courses/exercise.html", **page, **under)


@router.post("/courses/{course_slug}/assignments/{assignment_id}/exercises/{slug}/submissions")
def submit_under_assignment(
    here: HereDep, exercise: ExerciseDep, user: CurrentUser, submit: SubmitDep, code: Annotated[str, Form()] = ""
) -> Response:  # fmt: skip
    """Submit without JavaScript under the assignment (its gate refuses with the error page); show the attempt."""
    _item_of(here.assignment, exercise)
    submission = submit(user=user, exercise=exercise, code=code, assignment_id=here.assignment.id)
    history = f"/exercises/{quote(exercise.slug)}/history"
    return redirect(f"{history}?attempt={submission.id}&assignment={here.assignment.id}#attempt")


@router.get("/courses/{course_slug}/assignments/{assignment_id}/exercises/{slug}/insights")
def assignment_insights_page(
    request: Request, here: HereStaffDep, exercise: ExerciseDep, session: SessionDep
) -> Response:  # fmt: skip
    """Show what the course's learners get wrong on one exercise: any of its staff, TAs included, read-only."""
    _item_of(here.assignment, exercise)
    found = exercise_insights(session=session, exercise=exercise, course=here.course)
    scope = {"course": here.course, "assignment": here.assignment, "url": _assignment_url(here.assignment)}
    return render(request, "instructor/insights.html", exercise=exercise, ins=found, scope=scope)


# --- staff: members, CSV enrollment, the invite link ---------------------------------------------------------


@dataclass
class ManageExtras:
    """What the manage page shows besides the course: a CSV report, or a refused CSV with its message."""

    report: list[courses.EnrollRow] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    csv_text: str = ""
    csv_error: str = ""
    lms_report: roster.RosterReport | None = None
    lms_error: str = ""


def _manage_page(
    request: Request, access: CourseAccess, session: Session, extras: ManageExtras | None = None, status_code: int = 200
) -> Response:  # fmt: skip
    course = access.course
    invite = ""
    if course.invite_token and not course.is_practice:
        invite = f"{str(request.base_url).rstrip('/')}/join/{course.invite_token}"
    listed = courses.visible_assignments(session=session, course=course, user=access.user)
    return render(
        request, "courses/manage.html", status_code=status_code, course=course, role=access.role,
        can_edit=courses.can_edit(access.role), members=courses.members(session=session, course=course),
        invite=invite, assignments=listed, extras=extras or ManageExtras(),
        lms_contexts=len(roster.roster_contexts(session=session, course=course)),
    )  # fmt: skip


@router.get("/courses/{slug}/manage")
def manage_page(request: Request, access: CourseStaffDep, session: SessionDep) -> Response:
    return _manage_page(request, access, session)


@router.get("/courses/{slug}/members")
def members_page(access: CourseStaffDep) -> Response:
    """Send a reload or a bookmark of the enrollment form's address to the manage page (POST-redirect-GET)."""
    return redirect(f"{_course_url(access.course)}/manage#members")


@router.post("/courses/{slug}/members")
def enroll_form(
    request: Request,
    access: CourseStaffDep,
    session: SessionDep,
    csv: Annotated[str, Form()] = "",
    file: Annotated[UploadFile | None, File()] = None,
) -> Response:
    """Enroll the rows of a pasted or uploaded CSV; the page shows what happened to each row."""
    try:
        data: str | bytes = csv
        if file is not None and file.filename:
            data = file.file.read(accounts.MAX_IMPORT_BYTES + 1)  # decode_csv refuses anything larger
        if not (data.strip() if isinstance(data, str) else data):
            raise InvalidInput("paste the CSV or choose a file")
        report = courses.enroll_csv(session=session, course=access.course, text=data, actor=access.user)
        session.commit()
    except GpulabError as exc:
        session.rollback()
        return _manage_page(request, access, session, ManageExtras(csv_text=csv, csv_error=exc.message), 422)
    counts = {outcome.value: report.count(outcome) for outcome in courses.Outcome if report.count(outcome)}
    return _manage_page(request, access, session, ManageExtras(report=report.rows, counts=counts))


@router.post("/courses/{slug}/roster/sync")
def roster_sync_form(request: Request, access: CourseStaffDep, session: SessionDep, http: RosterHttpDep) -> Response:
    """Read the roster from the course's LMS (NRPS) and enroll it; the page shows what happened to each member."""
    try:
        report = roster.sync_roster(session=session, course=access.course, actor=access.user, http=http)
        session.commit()
    except GpulabError as exc:
        session.rollback()
        return _manage_page(request, access, session, ManageExtras(lms_error=exc.message), 422)
    return _manage_page(request, access, session, ManageExtras(lms_report=report))


@router.post("/courses/{slug}/invite")
def invite_form(
    request: Request, access: CourseStaffDep, session: SessionDep, rotate: Annotated[str, Form()] = ""
) -> Response:
    """Make the course's invite link, or replace it (``rotate``), which ends the old one (instructors)."""
    courses.require_course_role(session=session, course=access.course, user=access.user, roles=(CourseRole.instructor,))
    courses.invite_token_for(session=session, course=access.course, rotate=bool(rotate))
    session.commit()
    flash(request, "A new invite link: the old one no longer works." if rotate else "The invite link is ready.")
    return redirect(f"{_course_url(access.course)}/manage#invite")


# --- staff: assignments --------------------------------------------------------------------------------------


def _assignment_form_page(
    request: Request, session: Session, course: Course, form: AssignmentForm, *, assignment: Assignment | None = None,
    fresh: bool = True, error: str = "", status_code: int = 200,
) -> Response:  # fmt: skip
    return render(
        request, "courses/assignment_form.html", status_code=status_code, course=course, form=form,
        assignment=assignment, fresh=fresh, error=error, zones=ZONES,
        exercises=[(e.slug, e.current_version.title if e.current_version else e.slug)
                   for e in list_published(session=session)],
    )  # fmt: skip


def _require_editor(session: Session, access: CourseAccess | AssignmentAccess) -> None:
    courses.require_course_role(session=session, course=access.course, user=access.user, roles=(CourseRole.instructor,))


TextField = Annotated[str, Form(max_length=10_000)]


def posted_assignment(
    title: TextField = "", opens_at: TextField = "", due_at: TextField = "", late_until: TextField = "",
    tz: TextField = "UTC", late_credit_pct: TextField = "", counts: TextField = "best", max_attempts: TextField = "",
    rate_burst: TextField = "", rate_refill_s: TextField = "", is_published: TextField = "",
    practice: TextField = "examples_only", items: Annotated[str, Form(max_length=100_000)] = "",
) -> AssignmentForm:  # fmt: skip
    """Return the posted assignment form as typed (an unticked "published" box is not posted at all)."""
    return AssignmentForm(
        title=title, opens_at=opens_at, due_at=due_at, late_until=late_until, tz=tz, late_credit_pct=late_credit_pct,
        counts=counts, max_attempts=max_attempts, rate_burst=rate_burst, rate_refill_s=rate_refill_s,
        is_published=bool(is_published), practice=practice, items=items,
    )  # fmt: skip


PostedAssignment = Annotated[AssignmentForm, Depends(posted_assignment)]


@router.get("/courses/{slug}/assignments/new")
def new_assignment_page(request: Request, access: CourseStaffDep, session: SessionDep) -> Response:
    _require_editor(session, access)
    return _assignment_form_page(request, session, access.course, AssignmentForm())


@router.post("/courses/{slug}/assignments")
def create_assignment(
    request: Request, access: CourseStaffDep, session: SessionDep, form: PostedAssignment
) -> Response:
    try:
        body = form.checked()
        assignment = coursework.create_assignment(
            session=session, course=access.course, fields=body.fields(), items=body.chosen(), actor=access.user
        )
        session.commit()
    except GpulabError as exc:
        session.rollback()
        return _assignment_form_page(request, session, access.course, form, fresh=False, error=exc.message,
                                     status_code=422)  # fmt: skip
    flash(request, f"Assignment {assignment.title!r} created.")
    return redirect(f"{_course_url(access.course)}/manage#assignments")


@router.get("/courses/{course_slug}/assignments/{assignment_id}/edit")
def edit_assignment_page(request: Request, here: HereStaffDep, session: SessionDep) -> Response:
    _require_editor(session, here)
    form = AssignmentForm.of(here.assignment)
    return _assignment_form_page(request, session, here.course, form, assignment=here.assignment)


@router.post("/courses/{course_slug}/assignments/{assignment_id}/edit")
def update_assignment(request: Request, here: HereStaffDep, session: SessionDep, form: PostedAssignment) -> Response:
    try:
        body = form.checked()
        coursework.update_assignment(
            session=session, assignment=here.assignment, fields=body.fields(), items=body.chosen(), actor=here.user
        )
        session.commit()
    except GpulabError as exc:
        session.rollback()
        return _assignment_form_page(request, session, here.course, form, assignment=here.assignment, fresh=False,
                                     error=exc.message, status_code=422)  # fmt: skip
    flash(request, f"Assignment {here.assignment.title!r} saved.")
    return redirect(f"{_course_url(here.course)}/manage#assignments")


# --- staff: extensions ---------------------------------------------------------------------------------------


def _extensions_page(
    request: Request, session: Session, here: AssignmentAccess, form: ExtensionForm, *, fresh: bool = True,
    error: str = "", status_code: int = 200,
) -> Response:  # fmt: skip
    found = coursework.extensions_of(session=session, assignment=here.assignment)
    emails = accounts.emails_of(
        session=session, ids={i for e in found for i in (e.granted_by_id, e.revoked_by_id) if i is not None}
    )
    learners = courses.members(session=session, course=here.course, role=CourseRole.learner)
    return render(
        request, "courses/extensions.html", status_code=status_code, course=here.course,
        assignment=assignment_out(session=session, assignment=here.assignment, user=here.user, staff=True),
        audit=[ExtensionOut.of(e, emails) for e in found], learners=learners, form=form, fresh=fresh, error=error,
        zones=ZONES, base_url=_assignment_url(here.assignment), late_span=_late_span(here.assignment),
    )  # fmt: skip


def _late_span(assignment: Assignment) -> timedelta | None:
    """Return how long the assignment's late period lasts (None: it has none)."""
    if assignment.due_at is None or assignment.late_until is None:
        return None
    return as_utc(assignment.late_until) - as_utc(assignment.due_at)


@router.get("/courses/{course_slug}/assignments/{assignment_id}/extensions")
def extensions_page(request: Request, here: HereStaffDep, session: SessionDep) -> Response:
    form = ExtensionForm(due_at=local_value(here.assignment.due_at))  # the late end follows the due date (checked)
    return _extensions_page(request, session, here, form)


@router.post("/courses/{course_slug}/assignments/{assignment_id}/extensions")
def grant_form(
    request: Request,
    here: HereStaffDep,
    session: SessionDep,
    email: TextField = "",
    due_at: TextField = "",
    late_until: TextField = "",
    tz: TextField = "UTC",
    extra_attempts: TextField = "0",
    reason: TextField = "",
    no_late: TextField = "",
) -> Response:
    form = ExtensionForm(
        email=email, due_at=due_at, late_until=late_until, tz=tz, extra_attempts=extra_attempts, reason=reason,
        no_late=bool(no_late),
    )  # fmt: skip
    try:
        body = form.checked(_late_span(here.assignment))
        learner = session.scalar(select(User).where(User.email == body.email.strip().lower()))
        if learner is None:
            raise InvalidInput(f"no user {body.email!r}")
        coursework.grant_extension(
            session=session, assignment=here.assignment, learner=learner, due_at=body.due_at,
            late_until=body.late_until, extra_attempts=body.extra_attempts, reason=body.reason, actor=here.user,
        )  # fmt: skip
        session.commit()
    except GpulabError as exc:
        session.rollback()
        return _extensions_page(request, session, here, form, fresh=False, error=exc.message, status_code=422)
    flash(request, f"Extension granted to {learner.email}.")
    return redirect(f"{_assignment_url(here.assignment)}/extensions")


@router.post("/courses/{course_slug}/assignments/{assignment_id}/extensions/{extension_id}/revoke")
def revoke_form(
    request: Request, here: HereStaffDep, extension: ExtensionDep, user: CurrentUser, session: SessionDep
) -> Response:
    if extension.assignment_id != here.assignment.id:
        raise NotFound(f"no extension {extension.id} on this assignment")
    was_revoked = extension.revoked_at is not None
    coursework.revoke_extension(session=session, extension=extension, actor=user)
    session.commit()
    flash(request, "It was already revoked." if was_revoked else f"Extension of {extension.user.email} revoked.")
    return redirect(f"{_assignment_url(here.assignment)}/extensions")
