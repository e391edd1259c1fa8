"""Courses: who is in them with which role, how people join, and what each user may see.

Contract:
- Functions take the session keyword-only and never commit; they flush where the caller needs ids or the
  unique constraints checked. Who may call the staff functions (enroll, invite links) is the caller's check
  (``require_course_role``), except ``enroll_csv``, whose rules depend on the actor.
- Roles: ``course_role`` is the role a user has in a course. An admin counts as instructor in every course. In
  the practice course everyone logged in counts as learner, enrolled or not, and its staff list (``CourseMember``
  rows of instructors and TAs) names its staff: the site instructor role alone is no course role there either
  (it authors the bank; ``app.domain.courses.policy`` decides who sees whose work); elsewhere it is the
  ``CourseMember`` row's role or ``None``. ``is_staff``: instructor or TA; ``can_edit``: instructor only (a TA
  grades, reviews and grants extensions but edits neither the course nor the bank). ``require_course_role``
  raises ``NotFound`` for a user without a role (they may not learn that the course exists) and ``Forbidden``
  for a member whose role is not among those asked for.
- Creating: a site instructor or admin creates a course and becomes its instructor. A slug follows the
  exercises' rule (``worker.bank.spec.SLUG_RE``, whole string); ``practice`` is kept for the practice course.
- The practice course (``is_practice``, slug ``practice``, "Practice") is the open catalogue: every published
  exercise, for everyone logged in, without enrollment. ``ensure_practice_course`` makes it at start-up or
  migration; while it exists everyone logged in may open every published exercise (as before courses).
- Enrolling is idempotent. An existing member keeps their row, the ``source`` they first joined by and the
  higher of their role and the one asked for (instructor > TA > learner), so a CSV row or an invite never
  demotes staff; ``update_role=True`` sets exactly the role asked for (an LTI launch carries the LMS's role).
  Neither ``enroll`` nor ``unenroll`` demotes or removes the last instructor of a course (``Conflict``).
- ``enroll_csv`` takes each row on its own: a bad row is refused with its reason, the good rows still count.
  Columns (header row optional; without one: email, name, role, the admin import's order): ``email``, ``role``
  (learner by default; ``ta`` and ``instructor`` only when the actor can edit the course) and ``name`` (used
  for new accounts only). The file rules and caps are ``app.domain.accounts.people``' (``decode_csv``,
  ``read_table``). A missing account is made as a site learner with a one-time password
  (``people.create_account``). ``EnrollReport.as_csv`` echoes the report with formula-like cells defused.
- Invites: ``invite_token_for`` returns the course's link token, making one on first use; ``rotate=True``
  replaces it, so the old link stops working; ``close_invite`` turns the link off. ``join_by_invite`` enrolls
  the user as a learner (source ``invite``, idempotent); an unknown token is ``NotFound``.
- Visibility: ``courses_of`` lists a user's courses and roles, the practice course first (an admin gets every
  course). ``visible_assignments``: published ones for learners, all for staff, by position.
  ``may_open_exercise``: the exercise is published and either the practice course exists, or the user is a site
  instructor or admin, or it is an item of an assignment of a course where the user is staff, or of a
  published, already open (``opens_at`` unset or past) assignment of a course where the user is a learner.
"""

from __future__ import annotations

import csv
import enum
import io
import re
import secrets
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import and_, case, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, contains_eager

from app.domain.accounts import people
from app.domain.accounts.passwords import MAX_EMAIL_CHARS, check_email
from app.domain.audit import trail
from app.domain.audit.trail import Action
from app.domain.models import (
    COURSE_STAFF,
    Assignment,
    AssignmentItem,
    Course,
    CourseMember,
    CourseRole,
    Exercise,
    Role,
    User,
    utcnow,
)
from app.domain.platform.csvsafe import FORMULA_PREFIXES
from worker.bank.spec import SLUG_RE
from worker.core.errors import Conflict, Forbidden, GpulabError, InvalidInput, NotFound

PRACTICE_SLUG = "practice"
PRACTICE_TITLE = "Practice"
MAX_TITLE_CHARS = 200
SOURCES = frozenset({"manual", "csv", "invite", "lti", "upgrade"})  # upgrade: migration 0017 (practice staff)
STAFF = COURSE_STAFF  # the course roles that see and grade its work (``models.COURSE_STAFF``)
ANY_ROLE = frozenset(CourseRole)
RANK = {CourseRole.learner: 0, CourseRole.ta: 1, CourseRole.instructor: 2}
CSV_COLUMNS = ("email", "name", "role")
REPORT_COLUMNS = ("line", "email", "outcome", "role", "reason", "password")
INVITE_TOKEN_BYTES = 24  # 32 URL-safe characters (192 bits: no two links ever collide), under the column's 64
TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ARTICLE = {CourseRole.instructor: "an instructor", CourseRole.ta: "a TA", CourseRole.learner: "a learner"}
_PLURAL = {CourseRole.instructor: "instructors", CourseRole.ta: "TAs", CourseRole.learner: "learners"}


def is_staff(role: CourseRole | None) -> bool:
    """Say whether ``role`` grades and reviews in its course (instructor or TA)."""
    return role in STAFF


def can_edit(role: CourseRole | None) -> bool:
    """Say whether ``role`` may edit its course, its assignments and the bank (instructors only)."""
    return role is CourseRole.instructor


def _higher(a: CourseRole, b: CourseRole) -> CourseRole:
    return a if RANK[a] >= RANK[b] else b


def checked_text(value: str, what: str, max_chars: int) -> str:
    """Return ``value`` stripped, or raise ``InvalidInput`` (empty, too long, a NUL, not text)."""
    value = value.strip()
    if not value:
        raise InvalidInput(f"the {what} is empty")
    if len(value) > max_chars:
        raise InvalidInput(f"the {what} is longer than {max_chars} characters")
    if "\x00" in value:  # PostgreSQL text cannot hold one
        raise InvalidInput(f"the {what} contains a NUL character")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate from a JSON escape has no UTF-8 form
        raise InvalidInput(f"the {what} is not valid text") from exc
    return value


# --- courses and the practice course -------------------------------------------------------------------------


def find_practice_course(*, session: Session) -> Course | None:
    """Return the practice course, or ``None`` while there is none."""
    return session.scalar(select(Course).where(Course.is_practice.is_(True)).order_by(Course.id).limit(1))


def practice_course(*, session: Session) -> Course:
    """Return the practice course, making it if there is none (safe when two processes race)."""
    course = find_practice_course(session=session)
    if course is not None:
        return course
    course = Course(slug=PRACTICE_SLUG, title=PRACTICE_TITLE, is_practice=True)
    try:
        with session.begin_nested():
            session.add(course)
    except IntegrityError as exc:
        # Another process made it between our look-up and insert: theirs is the one.
        found = find_practice_course(session=session)
        if found is None:
            raise Conflict(f"the slug {PRACTICE_SLUG!r} is taken by a course that is not the practice course") from exc
        return found
    return course


def ensure_practice_course(*, session: Session) -> Course:
    """Make sure the practice course exists (start-up and migration call this); return it."""
    return practice_course(session=session)


def check_new_slug(*, session: Session, slug: str) -> None:
    """Raise ``InvalidInput`` for a slug no course can have, ``Conflict`` for one a course has (or is kept)."""
    if not SLUG_RE.fullmatch(slug):
        raise InvalidInput(
            f"{slug[:80]!r} is not a valid course slug: 3 to 64 characters of a-z, 0-9 and '-', "
            "not starting or ending with '-'"
        )
    if slug == PRACTICE_SLUG:
        raise Conflict(f"the slug {PRACTICE_SLUG!r} is kept for the practice course")
    if session.scalar(select(Course.id).where(Course.slug == slug)) is not None:
        raise Conflict(f"a course called {slug!r} already exists")


def create_course(*, session: Session, slug: str, title: str, creator: User) -> Course:
    """Add a course with ``creator`` (a site instructor or admin) as its instructor."""
    if creator.role not in (Role.instructor, Role.admin):
        raise Forbidden("only instructors and admins may create courses")
    check_new_slug(session=session, slug=slug)
    title = checked_text(title, "course title", MAX_TITLE_CHARS)
    course = Course(slug=slug, title=title)
    try:
        with session.begin_nested():  # a savepoint: losing a race leaves the caller's transaction usable
            session.add(course)
    except IntegrityError as exc:
        raise Conflict(f"a course called {slug!r} already exists") from exc
    enroll(session=session, course=course, user=creator, role=CourseRole.instructor, source="manual", actor=creator)
    return course


def get_course(*, session: Session, slug: str, user: User) -> tuple[Course, CourseRole]:
    """Return the course ``slug`` and ``user``'s role in it; ``NotFound`` if it is not theirs to know."""
    # A string no slug can be (a NUL, 5 KB) is not looked up at all.
    course = session.scalar(select(Course).where(Course.slug == slug)) if SLUG_RE.fullmatch(slug) else None
    if course is None:
        raise NotFound(f"no course called {slug[:80]!r}")
    return course, require_course_role(session=session, course=course, user=user, roles=ANY_ROLE)


# --- roles ---------------------------------------------------------------------------------------------------


def course_role(*, session: Session, course: Course, user: User) -> CourseRole | None:
    """Return ``user``'s role in ``course`` (admins are instructors everywhere), or ``None``."""
    if user.role is Role.admin:
        return CourseRole.instructor
    member = session.scalar(
        select(CourseMember.role).where(CourseMember.course_id == course.id, CourseMember.user_id == user.id)
    )
    if course.is_practice:  # the open catalogue: everyone learns there; its staff list says who else they are
        return member if member is not None else CourseRole.learner
    return member


def _needs(roles: Collection[CourseRole]) -> str:
    names = [_ARTICLE[r] for r in sorted(roles, key=RANK.__getitem__, reverse=True)]
    return " or ".join(names) if names else "a role nobody has"


def require_course_role(*, session: Session, course: Course, user: User, roles: Collection[CourseRole]) -> CourseRole:
    """Return ``user``'s role in ``course`` if it is one of ``roles``; else ``NotFound`` or ``Forbidden``."""
    role = course_role(session=session, course=course, user=user)
    if role is None:
        raise NotFound(f"no course called {course.slug!r}")
    if role not in roles:
        raise Forbidden(f"this needs {_needs(roles)} of the course {course.title!r}; you are {_ARTICLE[role]} there")
    return role


# --- membership ----------------------------------------------------------------------------------------------


def _membership(session: Session, course: Course, user: User) -> CourseMember | None:
    return session.scalar(
        select(CourseMember).where(CourseMember.course_id == course.id, CourseMember.user_id == user.id)
    )


def _keep_an_instructor(session: Session, course: Course, member: CourseMember) -> None:
    if course.is_practice:  # admins run it, with or without a staff list
        return
    others = session.scalar(
        select(func.count(CourseMember.id)).where(
            CourseMember.course_id == course.id,
            CourseMember.role == CourseRole.instructor,
            CourseMember.user_id != member.user_id,
        )
    )
    if not others:
        raise Conflict(f"{member.user.email} is the only instructor of {course.title!r}; add another one first")


def require_open(course: Course) -> None:
    """Raise ``Conflict`` if ``course`` is archived (read-only for everyone: nothing in it changes)."""
    if course.archived_at is not None:
        raise Conflict(
            f"the course {course.title!r} is archived: it is read-only (grades and history can still be read and "
            "exported; an admin can unarchive it)"
        )


def enroll(
    *,
    session: Session,
    course: Course,
    user: User,
    role: CourseRole = CourseRole.learner,
    source: str = "manual",
    update_role: bool = False,
    actor: User | None = None,
) -> tuple[CourseMember, bool]:
    """Make ``user`` a member of ``course`` (idempotent); return the membership and whether it is new.

    A change (a new member, a new role) is refused in an archived course and recorded in the audit trail;
    ``actor`` None: the person themselves (an invite, an LMS launch) or the platform.
    """
    if source not in SOURCES:
        raise InvalidInput(f"unknown enrollment source {source[:40]!r} ({', '.join(sorted(SOURCES))})")
    member = _membership(session, course, user)
    if member is None:
        require_open(course)
        member = CourseMember(course_id=course.id, user_id=user.id, role=role, source=source)
        try:
            with session.begin_nested():
                session.add(member)
        except IntegrityError:
            # A concurrent enrollment won the race: go on with its row, as if it had been there.
            member = _membership(session, course, user)
            if member is None:
                raise
        else:
            trail.record(
                session=session, action=Action.enrol, actor=actor, course_id=course.id, subject_id=user.id,
                target=f"course {course.slug}", after={"role": role, "source": source},
            )  # fmt: skip
            return member, True
    wanted = role if update_role else _higher(member.role, role)
    if wanted is not member.role:
        require_open(course)
        if member.role is CourseRole.instructor:
            _keep_an_instructor(session, course, member)
        trail.record(
            session=session, action=Action.role_change, actor=actor, course_id=course.id, subject_id=user.id,
            target=f"course {course.slug}", before={"role": member.role}, after={"role": wanted, "source": source},
        )  # fmt: skip
        member.role = wanted
        session.flush()
    return member, False


def unenroll(*, session: Session, course: Course, user: User, actor: User | None = None) -> bool:
    """Remove ``user`` from ``course``; return whether they were a member. The last instructor stays."""
    member = _membership(session, course, user)
    if member is None:
        return False
    require_open(course)
    if member.role is CourseRole.instructor:
        _keep_an_instructor(session, course, member)
    trail.record(
        session=session, action=Action.unenrol, actor=actor, course_id=course.id, subject_id=user.id,
        target=f"course {course.slug}", before={"role": member.role, "source": member.source},
    )  # fmt: skip
    session.delete(member)
    session.flush()
    return True


def members(*, session: Session, course: Course, role: CourseRole | None = None) -> list[CourseMember]:
    """Return the members of ``course`` (users loaded), instructors first, then TAs, learners; by e-mail."""
    rank = case({CourseRole.instructor: 0, CourseRole.ta: 1}, value=CourseMember.role, else_=2)
    stmt = (
        select(CourseMember)
        .join(CourseMember.user)
        .options(contains_eager(CourseMember.user))
        .where(CourseMember.course_id == course.id)
        .order_by(rank, User.email)
    )
    if role is not None:
        stmt = stmt.where(CourseMember.role == role)
    return list(session.scalars(stmt))


# --- CSV enrollment ------------------------------------------------------------------------------------------


class Outcome(enum.StrEnum):
    added = "added"  # an existing account, now a member
    created = "created"  # a new account (one-time password), now a member
    already = "already"  # was a member; role unchanged
    updated = "updated"  # was a member; role raised to the one in the file
    refused = "refused"  # nothing done: ``reason`` says why


@dataclass
class EnrollRow:
    line: int
    email: str
    outcome: Outcome
    role: str = ""  # the role the person has in the course after this row
    reason: str = ""
    password: str = ""  # a new account's one-time password: hand it over, never store it


@dataclass
class EnrollReport:
    rows: list[EnrollRow] = field(default_factory=list)

    def count(self, outcome: Outcome) -> int:
        """Return how many rows ended with ``outcome``."""
        return sum(1 for r in self.rows if r.outcome is outcome)

    def as_csv(self) -> str:
        """Return the report as CSV text, every cell a spreadsheet would run as a formula prefixed with ``'``."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\r\n")
        writer.writerow(REPORT_COLUMNS)
        for r in self.rows:
            cells = [str(r.line), r.email, r.outcome.value, r.role, r.reason, r.password]
            writer.writerow(["'" + c if c.startswith(FORMULA_PREFIXES) else c for c in cells])
        return out.getvalue()


@dataclass
class _Wanted:
    line: int
    email: str
    name: str
    role: CourseRole


def _parse_row(
    line: int, cells: list[str], columns: list[str], may_add_staff: bool, seen: dict[str, int]
) -> _Wanted | EnrollRow:
    values = dict(zip(columns, cells, strict=False))
    raw = values.get("email", "")[:MAX_EMAIL_CHARS]  # echoed back: never a whole line of junk

    def refused(reason: str) -> EnrollRow:
        return EnrollRow(line=line, email=raw, outcome=Outcome.refused, reason=reason)

    if len(cells) > len(columns):
        return refused(f"{len(cells)} columns, expected at most {len(columns)}")
    try:
        email = check_email(raw)
    except InvalidInput as exc:
        return refused(exc.message)
    if email in seen:
        return refused(f"{email} is already on line {seen[email]}")
    seen[email] = line
    role_name = (values.get("role") or "learner").lower()
    if role_name not in CourseRole.__members__:
        return refused(f"unknown role {role_name[:40]!r} (learner, ta or instructor)")
    role = CourseRole(role_name)
    if role in STAFF and not may_add_staff:
        return refused(f"only an instructor of the course may add {_PLURAL[role]}")
    name = values.get("name", "")
    if len(name) > people.MAX_NAME_CHARS:
        return refused(f"the name is longer than {people.MAX_NAME_CHARS} characters")
    if "\x00" in name:
        return refused("the name contains a NUL character")
    return _Wanted(line=line, email=email, name=name, role=role)


def _as_bytes(text: str | bytes) -> bytes:
    if isinstance(text, bytes):
        return text
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidInput("the file is not valid text") from exc


def enroll_csv(*, session: Session, course: Course, text: str | bytes, actor: User) -> EnrollReport:
    """Enroll each good row of a CSV file (making missing accounts); report what happened to every row."""
    actor_role = require_course_role(session=session, course=course, user=actor, roles=STAFF)
    content = people.decode_csv(_as_bytes(text))
    columns, rows = people.read_table(
        content, columns=CSV_COLUMNS, max_rows=people.MAX_IMPORT_ROWS, noun="people", verb="enroll"
    )
    seen: dict[str, int] = {}
    parsed = [_parse_row(line, cells, columns, can_edit(actor_role), seen) for line, cells in rows]
    wanted = [p for p in parsed if isinstance(p, _Wanted)]
    emails = [w.email for w in wanted]
    users = {u.email.lower(): u for u in session.scalars(select(User).where(func.lower(User.email).in_(emails)))}
    known = select(CourseMember.user_id, CourseMember.role).where(
        CourseMember.course_id == course.id, CourseMember.user_id.in_([u.id for u in users.values()])
    )
    was = {user_id: role for user_id, role in session.execute(known)}
    require_open(course)
    done = {w.line: _enroll_row(session, course, w, users.get(w.email), was, actor) for w in wanted}
    report = EnrollReport()
    for p in parsed:
        report.rows.append(done[p.line] if isinstance(p, _Wanted) else p)
    return report


def _enroll_row(
    session: Session, course: Course, wanted: _Wanted, user: User | None, was: dict[int, CourseRole], actor: User
) -> EnrollRow:
    row = EnrollRow(line=wanted.line, email=wanted.email, outcome=Outcome.added)
    try:
        # One savepoint per row: a row that fails leaves no account behind whose password nobody was shown.
        with session.begin_nested():
            if user is None:
                account = people.create_account(
                    session=session, email=wanted.email, name=wanted.name, role=Role.learner
                )
                user = session.scalars(select(User).where(User.email == account.email)).one()
                row.outcome, row.password = Outcome.created, account.password
            member, _ = enroll(session=session, course=course, user=user, role=wanted.role, source="csv", actor=actor)
    except GpulabError as exc:
        return EnrollRow(line=wanted.line, email=wanted.email, outcome=Outcome.refused, reason=exc.message)
    row.role = member.role.value
    before = was.get(user.id)
    if before is not None:
        row.outcome = Outcome.already if before is member.role else Outcome.updated
        if before is not member.role:
            row.reason = f"was {_ARTICLE[before]}"
        elif member.role is not wanted.role:
            row.reason = f"kept as {_ARTICLE[member.role]}: enrolling never lowers a role"
    if not user.is_active:
        disabled = "the account is disabled: they cannot log in until an admin enables it"
        row.reason = f"{row.reason}; {disabled}" if row.reason else disabled
    return row


# --- invite links --------------------------------------------------------------------------------------------


def invite_token_for(*, session: Session, course: Course, rotate: bool = False) -> str:
    """Return the token of ``course``'s invite link, making one if needed; ``rotate`` replaces the old one."""
    if course.is_practice:
        raise InvalidInput("the practice course is open to everyone logged in; it has no invite link")
    if course.invite_token is None or rotate:
        require_open(course)
        course.invite_token = secrets.token_urlsafe(INVITE_TOKEN_BYTES)
        session.flush()
    return course.invite_token


def close_invite(*, session: Session, course: Course) -> None:
    """Turn ``course``'s invite link off (a later ``invite_token_for`` makes a new one)."""
    course.invite_token = None
    session.flush()


def join_by_invite(*, session: Session, token: str, user: User) -> Course:
    """Enroll ``user`` as a learner of the course whose invite link holds ``token`` (idempotent); return it."""
    # A string no token can be (a NUL, 5 KB) is not looked up at all.
    course = session.scalar(select(Course).where(Course.invite_token == token)) if TOKEN_RE.fullmatch(token) else None
    if course is None:
        raise NotFound("this invite link is unknown or no longer valid; ask for a new one")
    enroll(session=session, course=course, user=user, role=CourseRole.learner, source="invite")
    return course


# --- what a user sees ----------------------------------------------------------------------------------------


def courses_of(*, session: Session, user: User, archived: bool = False) -> list[tuple[Course, CourseRole]]:
    """Return ``user``'s courses with their role in each, the practice course first, then by title.

    ``archived``: the archived ones instead of the others (a list's default view leaves them out).
    """
    found: list[tuple[Course, CourseRole]] = []
    practice = find_practice_course(session=session)
    if practice is not None and not archived:
        role = course_role(session=session, course=practice, user=user)
        found.append((practice, role or CourseRole.learner))
    shelf = Course.archived_at.is_not(None) if archived else Course.archived_at.is_(None)
    others = select(Course).where(Course.is_practice.is_(False), shelf).order_by(Course.title, Course.slug)
    if user.role is Role.admin:
        found += [(c, CourseRole.instructor) for c in session.scalars(others)]
        return found
    mine = others.add_columns(CourseMember.role).join(CourseMember).where(CourseMember.user_id == user.id)
    found += [(c, r) for c, r in session.execute(mine)]
    return found


def visible_assignments(*, session: Session, course: Course, user: User) -> list[Assignment]:
    """Return the assignments of ``course`` ``user`` may see: published ones for learners, all for staff."""
    role = require_course_role(session=session, course=course, user=user, roles=ANY_ROLE)
    stmt = select(Assignment).where(Assignment.course_id == course.id).order_by(Assignment.position, Assignment.id)
    if not is_staff(role):
        stmt = stmt.where(Assignment.is_published.is_(True))
    return list(session.scalars(stmt))


def may_open_exercise(*, session: Session, user: User, exercise: Exercise, now: datetime | None = None) -> bool:
    """Say whether ``user`` may open the published ``exercise`` (practice, a course of theirs, or site staff)."""
    if not exercise.is_published or exercise.current_version_id is None:
        return False
    if user.role in (Role.admin, Role.instructor):
        return True
    if find_practice_course(session=session) is not None:
        return True  # every published exercise is practice
    at = now or utcnow()
    opened = and_(Assignment.is_published.is_(True), or_(Assignment.opens_at.is_(None), Assignment.opens_at <= at))
    stmt = (
        select(AssignmentItem.id)
        .join(Assignment, Assignment.id == AssignmentItem.assignment_id)
        .join(CourseMember, CourseMember.course_id == Assignment.course_id)
        .where(
            AssignmentItem.exercise_id == exercise.id,
            CourseMember.user_id == user.id,
            or_(CourseMember.role.in_(STAFF), opened),
        )
        .limit(1)
    )
    return session.scalar(stmt) is not None


def require_exercise_access(*, session: Session, user: User, exercise: Exercise, now: datetime | None = None) -> None:
    """Raise ``NotFound`` (as for an exercise that does not exist) unless ``user`` may open ``exercise``."""
    if not may_open_exercise(session=session, user=user, exercise=exercise, now=now):
        raise NotFound(f"no exercise called {exercise.slug!r}")
