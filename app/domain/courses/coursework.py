"""Staff and learner actions on assignments: create and edit them, grant and revoke extensions, submit under one.

Contract:
- ``create_assignment`` and ``update_assignment`` take the fields of ``AssignmentFields`` (checked by
  ``assignments.validate_assignment_fields``) and the items as ``(exercise slug, weight)`` pairs, in order;
  only an editor of the course (its instructor, or an admin) may call them (``Forbidden`` otherwise). An
  unknown or unpublished exercise, a repeated one, or a weight outside 0..100 is ``InvalidInput``; nothing is
  written then. Editing items keeps the rows of items that stay (their overrides stay with them).
- ``grant_extension`` (course staff: instructors and TAs) adds an ``Extension`` for an enrolled learner with a
  reason (required): new dates, extra attempts, or time on a timed assessment (extra minutes, a multiplier: the
  accommodations ``timing.limit_for`` applies); ``revoke_extension`` marks one revoked, never deletes it, so the
  audit list keeps both.
- ``start_timed`` starts a learner's clock on a timed assignment (``app.domain.courses.timing``): once, inside
  its window, with its access code and from its networks, never while another exam runs for them.
- ``require_submittable`` is what a submission under an assignment passes before it is stored: the learner is
  a member of the course, the assignment's gate (``assignments.gate``) allows it now, else ``Forbidden`` or
  ``RateLimited`` with the gate's sentence. On PostgreSQL it locks the learner's membership row first, so two
  concurrent submissions of one learner are gated one after the other and an attempt limit is never overrun.
- Practice binds (``gate_submission`` without an assignment, through ``practice_under``): while a published
  assignment holds an exercise, its learners' practice submissions of it follow the assignment's ``practice``
  policy, in every window (before it opens, while open or late, after it closes, attempts used up):
  ``examples_only`` (the default) refuses them (``Forbidden``; the visible example runs stay open), ``counted``
  makes each one an attempt under the assignment, gated and counted by its rules. Staff are never bound.
- The caller commits.
"""

from __future__ import annotations

import hmac
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.audit import trail
from app.domain.audit.trail import Action
from app.domain.catalog.variants import version_params
from app.domain.courses import assignments, membership, timing
from app.domain.models import (
    Assignment,
    AssignmentItem,
    Course,
    CourseMember,
    CourseRole,
    Exercise,
    Extension,
    TimedAttempt,
    User,
    utcnow,
)
from worker.core import humane
from worker.core.errors import Forbidden, InvalidInput, NotFound

MAX_ITEMS = 100
MAX_REASON_CHARS = 2000
MAX_ACCESS_CODE_CHARS = 100
MAX_TITLE_CHARS = 200


@dataclass(frozen=True)
class AssignmentFields:
    """The editable fields of an assignment (dates in UTC; None: no such date or limit)."""

    title: str
    opens_at: datetime | None = None
    due_at: datetime | None = None
    late_until: datetime | None = None
    late_credit_pct: float = 50.0
    counts: str = "best"
    max_attempts: int | None = None
    rate_burst: int | None = None
    rate_refill_s: int | None = None
    is_published: bool = True
    practice: str = "examples_only"
    leaderboard: bool = True  # the boards of its exercises that opt in (app.domain.courses.leaderboard)
    # A timed assessment (app.domain.courses.timing); None: not timed, and the four below change nothing.
    time_limit_min: int | None = None
    submit_on_expiry: bool = True
    access_code: str = ""
    allowed_networks: str = ""
    exam_mode: bool = False
    feedback_after_close: bool = False


def _title(text: str) -> str:
    title = text.strip()
    if not title or len(title) > MAX_TITLE_CHARS or "\x00" in title:
        raise InvalidInput(f"an assignment needs a title of 1 to {MAX_TITLE_CHARS} characters")
    return title


def _check(fields: AssignmentFields) -> None:
    assignments.validate_assignment_fields(
        opens_at=fields.opens_at, due_at=fields.due_at, late_until=fields.late_until,
        late_credit_pct=fields.late_credit_pct, counts=fields.counts, max_attempts=fields.max_attempts,
        rate_burst=fields.rate_burst, rate_refill_s=fields.rate_refill_s, practice=fields.practice,
    )  # fmt: skip
    limit = fields.time_limit_min
    if limit is not None and not 1 <= limit <= timing.MAX_LIMIT_MIN:
        raise InvalidInput(f"a time limit must be 1 to {timing.MAX_LIMIT_MIN} minutes")
    code = fields.access_code.strip()
    if len(code) > MAX_ACCESS_CODE_CHARS or "\x00" in code:
        raise InvalidInput(f"an access code has at most {MAX_ACCESS_CODE_CHARS} characters")
    if len(fields.allowed_networks) > 4000:
        raise InvalidInput("the list of networks is too long (at most 4000 characters)")
    timing.parse_networks(fields.allowed_networks)  # each a CIDR block, or InvalidInput naming the one that is not


def _exercises(session: Session, items: Sequence[tuple[str, float]]) -> list[tuple[Exercise, float]]:
    """Resolve ``(slug, weight)`` pairs to published exercises, refusing the whole list on any bad one."""
    if len(items) > MAX_ITEMS:
        raise InvalidInput(f"an assignment holds at most {MAX_ITEMS} exercises")
    slugs = [slug for slug, _ in items]
    repeated = sorted({s for s in slugs if slugs.count(s) > 1})
    if repeated:
        raise InvalidInput(f"each exercise may appear once: {', '.join(repeated)}")
    found = {e.slug: e for e in session.scalars(select(Exercise).where(Exercise.slug.in_(slugs)))}
    resolved = []
    for slug, weight in items:
        exercise = found.get(slug)
        if exercise is None or not exercise.is_published:
            raise InvalidInput(f"no published exercise called {slug!r}")
        if not math.isfinite(weight) or not 0 <= weight <= 100:
            raise InvalidInput(f"the weight of {slug!r} must be from 0 to 100")
        resolved.append((exercise, weight))
    return resolved


def _require_editor(session: Session, course: Course, actor: User) -> None:
    membership.require_course_role(session=session, course=course, user=actor, roles=(CourseRole.instructor,))
    membership.require_open(course)


def _record_publication(session: Session, assignment: Assignment, was: bool | None, actor: User) -> None:
    if was is assignment.is_published or (was is None and not assignment.is_published):
        return  # unchanged, or made as a draft: nothing reached learners
    trail.record(
        session=session, action=Action.publish if assignment.is_published else Action.unpublish, actor=actor,
        course_id=assignment.course_id, target=f"assignment {assignment.id} ({assignment.title[:80]})",
        before=None if was is None else {"is_published": was}, after={"is_published": assignment.is_published},
    )  # fmt: skip


def _apply(assignment: Assignment, fields: AssignmentFields) -> None:
    assignment.title = _title(fields.title)
    for name in (
        "opens_at", "due_at", "late_until", "late_credit_pct", "counts", "max_attempts", "rate_burst",
        "rate_refill_s", "is_published", "practice", "leaderboard", "time_limit_min", "submit_on_expiry",
        "exam_mode", "feedback_after_close",
    ):  # fmt: skip
        setattr(assignment, name, getattr(fields, name))
    assignment.access_code = fields.access_code.strip()
    assignment.allowed_networks = " ".join(str(n) for n in timing.parse_networks(fields.allowed_networks))


def _set_items(assignment: Assignment, chosen: list[tuple[Exercise, float]]) -> None:
    kept = {item.exercise_id: item for item in assignment.items}
    assignment.items = []
    for position, (exercise, weight) in enumerate(chosen):
        item = kept.get(exercise.id) or AssignmentItem(exercise=exercise)
        item.position, item.weight = position, weight
        assignment.items.append(item)


def create_assignment(
    *, session: Session, course: Course, fields: AssignmentFields, items: Sequence[tuple[str, float]], actor: User
) -> Assignment:
    """Add an assignment of ``items`` at the end of ``course``."""
    _require_editor(session, course, actor)
    _check(fields)
    chosen = _exercises(session, items)
    position = max((a.position for a in course.assignments), default=-1) + 1
    assignment = Assignment(course=course, position=position, title="")
    _apply(assignment, fields)
    _set_items(assignment, chosen)
    session.add(assignment)
    session.flush()
    _record_publication(session, assignment, None, actor)
    return assignment


def update_assignment(
    *,
    session: Session,
    assignment: Assignment,
    fields: AssignmentFields,
    items: Sequence[tuple[str, float]],
    actor: User,
) -> Assignment:
    """Replace the fields and items of ``assignment``."""
    _require_editor(session, assignment.course, actor)
    _check(fields)
    chosen = _exercises(session, items)
    was = assignment.is_published
    _apply(assignment, fields)
    _set_items(assignment, chosen)
    session.flush()
    _record_publication(session, assignment, was, actor)
    return assignment


def _learner_of(session: Session, course: Course, user: User) -> CourseMember:
    member = session.scalar(
        select(CourseMember).where(CourseMember.course_id == course.id, CourseMember.user_id == user.id)
    )
    if member is None or member.role is not CourseRole.learner:
        raise InvalidInput(f"{user.email} is not a learner of {course.title!r}")
    return member


def grant_extension(
    *,
    session: Session,
    assignment: Assignment,
    learner: User,
    due_at: datetime | None,
    late_until: datetime | None,
    extra_attempts: int,
    reason: str,
    actor: User,
    extra_minutes: int = 0,
    time_multiplier: float = 1.0,
) -> Extension:
    """Give ``learner`` new dates, attempts or time on a timed assessment on ``assignment``, saying why.

    ``due_at`` None keeps the assignment's dates (an extension of attempts or time only). Time accommodations
    (``extra_minutes``, ``time_multiplier``) apply to a clock started after they were granted.
    """
    membership.require_course_role(session=session, course=assignment.course, user=actor, roles=membership.STAFF)
    membership.require_open(assignment.course)
    _learner_of(session, assignment.course, learner)
    why = reason.strip()
    if not why or len(why) > MAX_REASON_CHARS or "\x00" in why:
        raise InvalidInput(f"say why, in 1 to {MAX_REASON_CHARS} characters (it is kept in the audit list)")
    assignments.validate_extension_fields(
        assignment=assignment, due_at=due_at, late_until=late_until, extra_attempts=extra_attempts
    )
    if not 0 <= extra_minutes <= timing.MAX_LIMIT_MIN:
        raise InvalidInput(f"extra time must be 0 to {timing.MAX_LIMIT_MIN} minutes")
    if not (math.isfinite(time_multiplier) and 1.0 <= time_multiplier <= timing.MAX_MULTIPLIER):
        raise InvalidInput(f"a time multiplier must be from 1 to {timing.MAX_MULTIPLIER:g} (1.5 gives half again)")
    if due_at is None and late_until is not None:
        raise InvalidInput("a late end needs its own due date")
    if due_at is None and not (extra_attempts or extra_minutes or time_multiplier > 1.0):
        raise InvalidInput("give new dates, extra attempts or extra time: this extension gives nothing")
    extension = Extension(
        assignment_id=assignment.id, user_id=learner.id, due_at=due_at, late_until=late_until,
        extra_attempts=extra_attempts, reason=why, granted_by_id=actor.id, extra_minutes=extra_minutes,
        time_multiplier=time_multiplier,
    )  # fmt: skip
    session.add(extension)
    session.flush()
    trail.record(
        session=session, action=Action.extension_grant, actor=actor, course_id=assignment.course_id,
        subject_id=learner.id, target=f"assignment {assignment.id} ({assignment.title[:80]})",
        after=_extension_fields(extension),
    )  # fmt: skip
    return extension


def _extension_fields(extension: Extension) -> dict[str, Any]:
    return {
        "extension": extension.id, "due_at": extension.due_at, "late_until": extension.late_until,
        "extra_attempts": extension.extra_attempts, "extra_minutes": extension.extra_minutes,
        "time_multiplier": extension.time_multiplier,
    }  # fmt: skip


def revoke_extension(*, session: Session, extension: Extension, actor: User) -> Extension:
    """Mark ``extension`` revoked (kept for the audit list)."""
    assignment = session.get(Assignment, extension.assignment_id)
    if assignment is None:
        raise NotFound(f"no extension {extension.id}")
    membership.require_course_role(session=session, course=assignment.course, user=actor, roles=membership.STAFF)
    membership.require_open(assignment.course)
    if extension.revoked_at is None:
        extension.revoked_at, extension.revoked_by_id = utcnow(), actor.id
        session.flush()
        trail.record(
            session=session, action=Action.extension_revoke, actor=actor, course_id=assignment.course_id,
            subject_id=extension.user_id, target=f"assignment {assignment.id} ({assignment.title[:80]})",
            before=_extension_fields(extension), after={"revoked": True},
        )  # fmt: skip
    return extension


def extensions_of(*, session: Session, assignment: Assignment) -> list[Extension]:
    """Return every extension of ``assignment``, newest first (revoked ones included)."""
    stmt = select(Extension).where(Extension.assignment_id == assignment.id).order_by(Extension.created_at.desc())
    return list(session.scalars(stmt))


def start_timed(
    *, session: Session, assignment: Assignment, user: User, access_code: str, client_ip: str | None, now: datetime
) -> TimedAttempt:
    """Start ``user``'s clock on timed ``assignment`` (once: starting again returns the running attempt).

    Refused (``Forbidden``) for staff, outside the window, with a wrong access code, from a network outside the
    list, or while another exam runs for them; the end is fixed here (``timing.end_of``).
    """
    member = session.scalar(
        select(CourseMember)
        .where(CourseMember.course_id == assignment.course_id, CourseMember.user_id == user.id)
        .with_for_update()  # two tabs starting at once start one clock
    )
    if member is None or not assignment.is_published:
        raise NotFound(f"no assignment {assignment.id}")
    if member.role is not CourseRole.learner:
        raise Forbidden("staff do not start a timed assignment: its clock is the learners'")
    if not timing.is_timed(assignment):
        raise InvalidInput(f"{assignment.title!r} has no time limit: there is nothing to start")
    found = timing.attempt_of(session=session, assignment=assignment, user=user)
    if found is not None:
        return found
    membership.require_open(assignment.course)
    dates = assignments.effective_dates(session=session, assignment=assignment, user=user)
    match assignments.window(dates, now):
        case assignments.Window.not_open:
            assert dates.opens_at is not None
            raise Forbidden(f"it opens on {humane.utc_text(dates.opens_at)}")
        case assignments.Window.closed:
            raise Forbidden("it is closed: its window has passed")
    if assignment.access_code and not hmac.compare_digest(access_code.strip(), assignment.access_code):
        raise Forbidden("that is not the access code: ask the person running the exam for it")
    if not timing.in_networks(assignment, client_ip):
        raise Forbidden("it can be started only from the exam room's network")
    timing.lockout(session=session, user=user, assignment_id=assignment.id, now=now)
    close = dates.late_until or dates.due_at
    limit = timing.limit_for(assignment, dates.extension)
    attempt = TimedAttempt(
        assignment_id=assignment.id, user_id=user.id, started_at=now, ends_at=timing.end_of(now, limit, close),
        started_from=(client_ip or "")[:64],
    )  # fmt: skip
    session.add(attempt)
    session.flush()
    return attempt


def require_submittable(
    *,
    session: Session,
    assignment: Assignment,
    exercise: Exercise,
    user: User,
    now: datetime | None = None,
    client_ip: str | None = None,
) -> assignments.Gate:
    """Return the gate of a submission ``user`` is about to make, or raise what refuses it.

    ``client_ip``: the request's address, held to a timed assignment's networks (``timing.in_networks``).
    """
    member = session.scalar(
        select(CourseMember)
        .where(CourseMember.course_id == assignment.course_id, CourseMember.user_id == user.id)
        .with_for_update()  # one learner's submissions are gated one at a time (PostgreSQL; SQLite: one writer)
    )
    if member is None:
        raise NotFound(f"no assignment {assignment.id}")
    if member.role is not CourseRole.learner:
        raise Forbidden("staff try exercises outside the assignment; submissions under it are the learners'")
    gate = assignments.gate(session=session, assignment=assignment, exercise=exercise, user=user, now=now or utcnow())
    assignments.check_submit(gate)
    if client_ip is not None and timing.is_timed(assignment) and not timing.in_networks(assignment, client_ip):
        raise Forbidden("this assignment can be worked on only from the exam room's network")
    return gate


def holding_assignments(*, session: Session, exercise: Exercise, user: User) -> list[Assignment]:
    """Return the published assignments holding ``exercise`` in the courses where ``user`` is a learner."""
    stmt = (
        select(Assignment)
        .join(AssignmentItem, AssignmentItem.assignment_id == Assignment.id)
        .join(CourseMember, CourseMember.course_id == Assignment.course_id)
        .where(
            AssignmentItem.exercise_id == exercise.id,
            CourseMember.user_id == user.id,
            CourseMember.role == CourseRole.learner,
            Assignment.is_published.is_(True),
            # An archived course's assignments bind nothing any more: its exercises are open practice again.
            Assignment.course_id.in_(select(Course.id).where(Course.archived_at.is_(None))),
        )
        .order_by(Assignment.course_id, Assignment.position, Assignment.id)
    )
    return list(session.scalars(stmt))


def practice_refusal(*, session: Session, assignment: Assignment, exercise: Exercise, user: User) -> str:
    """Say why practice on ``exercise`` runs only its example tests while ``assignment`` holds it, and what now.

    "Submit under the assignment" only while its gate lets ``user`` in; else the gate's own sentence (closed, no
    attempts left...), which is then why no graded attempt is possible anywhere.
    """
    held = (
        f"this exercise is part of the assignment {assignment.title!r} ({assignment.course.title}): practice runs "
        "only the example tests"
    )
    now_there = assignments.gate(session=session, assignment=assignment, exercise=exercise, user=user, now=utcnow())
    if now_there.allowed:
        return f"{held}; submit under the assignment (no attempt was used)"
    return f"{held}; under the assignment: {now_there.reason} (no attempt was used)"


def practice_under(*, session: Session, exercise: Exercise, user: User) -> Assignment | None:
    """Return the assignment a practice submission of ``user`` counts under (None: plain practice), or refuse it.

    An assignment that holds the exercise binds its learners' practice on it (``Assignment.practice``):
    ``examples_only`` refuses the graded submission (example runs stay open), ``counted`` makes it an attempt
    under the assignment, gated by its rules. Of several ``counted`` ones, the first that lets it in now.
    """
    holding = holding_assignments(session=session, exercise=exercise, user=user)
    for assignment in holding:
        if assignment.practice != "counted":
            raise Forbidden(practice_refusal(session=session, assignment=assignment, exercise=exercise, user=user))
    now = utcnow()
    for assignment in holding:
        if assignments.gate(session=session, assignment=assignment, exercise=exercise, user=user, now=now).allowed:
            return assignment
    return holding[0] if holding else None  # its gate refuses it, with its own sentence


def gate_submission(
    *, session: Session, assignment_id: int | None, exercise: Exercise, user: User, client_ip: str | None = None
) -> int | None:
    """Return the assignment id a submission is made under, after its gate let it through (None: practice).

    A learner in an exam (``timing.lockout``) may submit only under it.
    """
    now = utcnow()
    if assignment_id is None:
        timing.lockout(session=session, user=user, assignment_id=None, now=now)
        bound = practice_under(session=session, exercise=exercise, user=user)
        if bound is None:
            return None
        require_submittable(session=session, assignment=bound, exercise=exercise, user=user, client_ip=client_ip)
        return bound.id
    assignment = session.get(Assignment, assignment_id)
    if assignment is None:
        raise NotFound(f"no assignment {assignment_id}")
    timing.lockout(session=session, user=user, assignment_id=assignment.id, now=now)
    require_submittable(session=session, assignment=assignment, exercise=exercise, user=user, client_ip=client_ip)
    return assignment.id


def variant_context(*, session: Session, exercise: Exercise, user: User) -> int | None:
    """Return the assignment whose variant the practice page of ``exercise`` shows ``user`` (None: practice).

    It is the one a practice submission would count under (``practice_under``); where practice is refused (example
    runs only), the page is plain practice.
    """
    try:
        bound = practice_under(session=session, exercise=exercise, user=user)
    except Forbidden:
        return None
    return bound.id if bound is not None else None


def run_variant(
    *, session: Session, exercise: Exercise, user: User, assignment_id: int | None, client_ip: str | None = None
) -> dict[str, Any]:
    """Return ``user``'s variant of ``exercise`` for an example run made on a page.

    ``assignment_id``: the assignment page it was made on (an assignment that holds the exercise, in a course of the
    user's: ``NotFound`` otherwise); ``None``: the practice page (``variant_context``). A learner in an exam runs
    examples only under it, and a timed assignment's examples run only while the learner's time does.
    """
    now = utcnow()
    timing.lockout(session=session, user=user, assignment_id=assignment_id, now=now)
    if assignment_id is not None:
        held = session.get(Assignment, assignment_id)
        if (
            held is not None
            and membership.course_role(session=session, course=held.course, user=user) is CourseRole.learner
        ):
            refused = timing.refusal(session=session, assignment=held, user=user, now=now, client_ip=client_ip)
            if refused is not None:
                raise Forbidden(refused)
    version = exercise.current_version
    if version is None or version.kind != "code":
        return {}
    if assignment_id is None:
        assignment_id = variant_context(session=session, exercise=exercise, user=user)
    else:
        assignment = session.get(Assignment, assignment_id)
        holds = assignment is not None and any(item.exercise_id == exercise.id for item in assignment.items)
        member = (
            holds
            and assignment is not None
            and membership.course_role(session=session, course=assignment.course, user=user)
        )
        if not member:
            raise NotFound(f"no assignment {assignment_id} with this exercise for this user")
    return version_params(version=version, user=user, assignment_id=assignment_id)


def learner_params(
    *, session: Session, exercise: Exercise, user: User, assignment_id: int | None = None, practice: bool = True
) -> dict[str, Any] | None:
    """Return the variant ``user`` reads ``exercise`` in on a page (``None``: the default, or not a code exercise).

    ``practice``: the practice page (its variant is ``variant_context``'s); else the page of ``assignment_id``.
    """
    version = exercise.current_version
    if version is None or version.kind != "code":
        return None
    if practice:
        assignment_id = variant_context(session=session, exercise=exercise, user=user)
    return version_params(version=version, user=user, assignment_id=assignment_id)
