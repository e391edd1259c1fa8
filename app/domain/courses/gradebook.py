"""The course gradebook: every learner's counted result on every assignment item, overrides, and its CSV export.

Contract:
- Who: ``gradebook``, ``override``, ``revert_override`` and ``override_history`` are for the course's staff
  (instructors and TAs; an admin counts as instructor), checked with ``membership.require_course_role``:
  ``NotFound`` for a user without a role in the course, ``Forbidden`` for a learner. ``my_grades`` is any
  member's own row.
- Rows: the course's learners (``CourseMember`` rows with the learner role, so in the practice course only those
  enrolled), by e-mail. Columns: every item of every assignment of the course, by assignment (position, id), then
  item (position, id). Unpublished assignments are in the staff gradebook (``AssignmentHead.is_published``) but
  count in no total, and ``my_grades`` leaves them out, so a learner's own numbers are those of their row.
- Cells are ``app.domain.courses.assignments.counted``'s rules, not new ones: which submission counts (best credited or
  last settled, platform failures left out), its credit from the learner's effective dates (the newest unrevoked
  extension), late and extended, the newest unreverted override replacing the score. The gradebook reads what it
  needs in a fixed number of queries (eight at most, however many learners and items) and hands the rows to the
  assignments module's pure cores, the very ones ``counted`` and ``assignment_pct`` call: ``countable`` (the
  submission filter), ``dates_from``, ``choose``, ``weighs`` and ``weighted_pct``. Only the reading is its own
  (the newest unrevoked extension and unreverted override per cell, picked in bulk); a test checks every cell
  and assignment against ``counted`` and ``assignment_pct``.
- Numbers: a cell's ``score_pct`` and ``computed_pct`` are 0..100. An assignment's pct is the weighted mean of its
  items' scores (0 without weight). The course total is the plain mean of the pcts of the published assignments
  that carry weight: every assignment weighs the same, whatever its items; None when there is none. Work not done
  yet counts 0: it is a running total, not a forecast.
- Overrides: ``override`` adds a ``GradeOverride`` (score 0..100, a comment of 1 to ``MAX_COMMENT_CHARS``
  characters, required for the audit list) for a learner of the course on an item of the course. The newest
  unreverted one counts, so an older one counts again once a newer one is reverted, and the computed score once
  none is left. ``revert_override`` marks one reverted (when, by whom) and never deletes it; reverting it again
  changes nothing (the first revert stays on record). ``override_history`` lists the course's overrides, reverted
  ones included, newest first, each saying whether it is the one in force.
- CSV (``gradebook_csv``): columns ``email``, ``name``; per item ``<assignment> / <exercise>`` (the score, one
  decimal) and ``<assignment> / <exercise> flags`` (``L`` late, ``E`` extended, ``O`` overridden, in that order,
  empty for none), so score cells stay plain numbers a spreadsheet can sum; per assignment ``<assignment> %``;
  ``total %`` (empty when there is no total). Every cell goes through ``platform.csvsafe.csv_cell`` (formula-safe).
- Functions that take a session take keyword-only arguments and never commit; ``override`` and
  ``revert_override`` flush (the caller commits).
"""

from __future__ import annotations

import csv
import io
import math
from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, aliased, load_only, selectinload

from app.domain.audit import trail
from app.domain.audit.trail import Action
from app.domain.courses import assignments, membership
from app.domain.courses.assignments import Counted
from app.domain.models import (
    Assignment,
    AssignmentItem,
    Course,
    CourseMember,
    CourseRole,
    Exercise,
    ExerciseVersion,
    GradeOverride,
    Submission,
    User,
    utcnow,
)
from app.domain.platform.clock import UtcDatetime, as_utc
from app.domain.platform.csvsafe import csv_cell
from worker.core.errors import InvalidInput, NotFound

MAX_COMMENT_CHARS = 2000
MAX_ID = 2**31 - 1  # PostgreSQL's integer: a larger id is no row, not a database error
FLAGS = (("L", "late"), ("E", "extended"), ("O", "overridden"))
# What counting reads of a submission; the code and the output stay in the database.
_SCORED = (
    Submission.user_id, Submission.assignment_id, Submission.status, Submission.verdict, Submission.score,
    Submission.max_score, Submission.created_at,
)  # fmt: skip


@dataclass(frozen=True)
class OverrideNote:
    """The override that replaces a cell's score: its score, why, who and when."""

    id: int
    score_pct: float
    comment: str
    by: str | None  # the author's e-mail (None: their account is gone)
    at: UtcDatetime


@dataclass(frozen=True)
class Cell:
    """One learner's counted result on one item, as ``assignments.counted`` has it."""

    item_id: int
    submission_id: str | None  # the submission that counts (None: nothing settled yet)
    score_pct: float  # 0..100: the override's when there is one, else computed_pct
    computed_pct: float  # 0..100 from the submissions alone
    credit_pct: float | None  # the credit applied to the counted submission (100, the late credit, None)
    late: bool
    extended: bool
    override: OverrideNote | None

    @property
    def overridden(self) -> bool:
        return self.override is not None


@dataclass(frozen=True)
class Column:
    """One gradebook column: an item of an assignment."""

    item_id: int
    assignment_id: int
    assignment: str  # the assignment's title
    exercise: str  # the exercise's slug
    weight: float
    title: str = ""  # the exercise's title, as pages show it (the CSV keeps the slug)

    @property
    def label(self) -> str:
        return f"{self.assignment} / {self.exercise}"


@dataclass(frozen=True)
class AssignmentHead:
    """One assignment of the gradebook, its items' columns, and whether it counts in the course total."""

    id: int
    title: str
    is_published: bool
    counts_in_total: bool  # published and carrying weight
    item_ids: tuple[int, ...]


@dataclass(frozen=True)
class LearnerGrades:
    """One learner's row: a cell per column, each assignment's pct (by assignment id) and the course total."""

    user_id: int
    email: str
    name: str
    cells: tuple[Cell, ...]
    assignment_pct: dict[int, float]
    total_pct: float | None

    def cell(self, item_id: int) -> Cell:
        """Return the cell of the item ``item_id``."""
        return next(c for c in self.cells if c.item_id == item_id)


@dataclass(frozen=True)
class Gradebook:
    """A course's gradebook: its assignments, a column per item, a row per learner."""

    course_id: int
    assignments: tuple[AssignmentHead, ...]
    columns: tuple[Column, ...]
    rows: tuple[LearnerGrades, ...]


@dataclass(frozen=True)
class OverrideEntry:
    """One line of the override audit list."""

    id: int
    item_id: int
    assignment: str
    exercise: str
    learner: str  # e-mail
    score_pct: float
    comment: str
    by: str | None
    at: UtcDatetime
    reverted_at: UtcDatetime | None
    reverted_by: str | None
    in_force: bool  # the newest unreverted override of its cell: the one that counts

    @property
    def reverted(self) -> bool:
        return self.reverted_at is not None


# --- reading the rows once ------------------------------------------------------------------------------------


def _assignments(session: Session, course: Course, *, published_only: bool) -> list[Assignment]:
    stmt = (
        select(Assignment)
        .where(Assignment.course_id == course.id)
        .options(
            selectinload(Assignment.items)
            .selectinload(AssignmentItem.exercise)
            .selectinload(Exercise.current_version)
            .load_only(ExerciseVersion.id, ExerciseVersion.title)  # the title only: files hold every hidden test
        )
        .order_by(Assignment.position, Assignment.id)
    )
    if published_only:
        stmt = stmt.where(Assignment.is_published.is_(True))
    return list(session.scalars(stmt))


def _items(assignment: Assignment) -> list[AssignmentItem]:
    return sorted(assignment.items, key=lambda item: (item.position, item.id))


def _submissions(
    session: Session, assignment_ids: list[int], user_ids: list[int]
) -> dict[tuple[int, int, int], list[Submission]]:
    """Return the countable submissions per (assignment, exercise, learner), oldest first, as ``counted`` reads them."""
    stmt = (
        select(Submission, ExerciseVersion.exercise_id)
        .join(ExerciseVersion, Submission.exercise_version_id == ExerciseVersion.id)
        .where(
            Submission.assignment_id.in_(assignment_ids),
            Submission.user_id.in_(user_ids),
            *assignments.countable(),
        )
        .options(load_only(*_SCORED))
        .order_by(Submission.created_at, Submission.id)
    )
    found: dict[tuple[int, int, int], list[Submission]] = defaultdict(list)
    for submission, exercise_id in session.execute(stmt):
        assert submission.assignment_id is not None and submission.user_id is not None  # the filter says so
        found[(submission.assignment_id, exercise_id, submission.user_id)].append(submission)
    return found


def _overrides(
    session: Session, item_ids: list[int], user_ids: list[int]
) -> dict[tuple[int, int], tuple[GradeOverride, str | None]]:
    """Return the override in force per (item, learner), newest unreverted, with its author's e-mail."""
    stmt = (
        select(GradeOverride, User.email)
        .outerjoin(User, User.id == GradeOverride.created_by_id)
        .where(
            GradeOverride.item_id.in_(item_ids),
            GradeOverride.user_id.in_(user_ids),
            GradeOverride.reverted_at.is_(None),
        )
        .order_by(GradeOverride.created_at, GradeOverride.id)
    )
    return {(o.item_id, o.user_id): (o, email) for o, email in session.execute(stmt)}


# --- the rows, by the assignments module's rules ----------------------------------------------------------------


def _cell(counted: Counted, author: str | None) -> Cell:
    o = counted.override
    note = None if o is None else OverrideNote(o.id, o.score_pct, o.comment, author, as_utc(o.created_at))
    return Cell(
        item_id=counted.item.id,
        submission_id=counted.submission.id if counted.submission is not None else None,
        score_pct=counted.score_pct,
        computed_pct=counted.computed_pct,
        credit_pct=counted.credit_pct,
        late=counted.late,
        extended=counted.extended,
        override=note,
    )


def _counts_in_total(assignment: Assignment) -> bool:
    return assignment.is_published and assignments.weighs(assignment)


def _rows(session: Session, chosen: list[Assignment], learners: list[User]) -> list[LearnerGrades]:
    """Return each learner's row on the ``chosen`` assignments, from three queries whatever their numbers."""
    if not learners:
        return []
    assignment_ids = [a.id for a in chosen]
    user_ids = [u.id for u in learners]
    item_ids = [item.id for a in chosen for item in a.items]
    extensions = (
        assignments.extensions_in_force(session=session, assignment_ids=assignment_ids, user_ids=user_ids)
        if chosen
        else {}
    )
    submissions = _submissions(session, assignment_ids, user_ids) if chosen else {}
    overrides = _overrides(session, item_ids, user_ids) if item_ids else {}
    rows = []
    for user in learners:
        cells: dict[int, Cell] = {}
        pcts: dict[int, float] = {}
        for assignment in chosen:
            dates = assignments.dates_from(assignment, extensions.get((assignment.id, user.id)))
            for item in _items(assignment):
                override, author = overrides.get((item.id, user.id), (None, None))
                mine = submissions.get((assignment.id, item.exercise_id, user.id), [])
                counted = assignments.choose(
                    assignment=assignment, item=item, dates=dates, submissions=mine, override=override
                )
                cells[item.id] = _cell(counted, author)
            # In ``assignment_pct``'s order of items, so the sum is the same to the last bit.
            pcts[assignment.id] = assignments.weighted_pct((i.weight, cells[i.id].score_pct) for i in assignment.items)
        # Every assignment weighs the same in the total, whatever its number of items or their weights.
        counting = [pcts[a.id] for a in chosen if _counts_in_total(a)]
        total = sum(counting) / len(counting) if counting else None
        rows.append(LearnerGrades(user.id, user.email, user.name, tuple(cells.values()), pcts, total))
    return rows


def _heads(chosen: list[Assignment]) -> tuple[AssignmentHead, ...]:
    return tuple(
        AssignmentHead(a.id, a.title, a.is_published, _counts_in_total(a), tuple(i.id for i in _items(a)))
        for a in chosen
    )


def _columns(chosen: list[Assignment]) -> tuple[Column, ...]:
    return tuple(
        Column(item.id, a.id, a.title, item.exercise.slug, item.weight, _title(item.exercise))
        for a in chosen
        for item in _items(a)
    )


def _title(exercise: Exercise) -> str:
    return exercise.current_version.title if exercise.current_version is not None else exercise.slug


# --- reading the gradebook --------------------------------------------------------------------------------------


def gradebook(*, session: Session, course: Course, viewer: User) -> Gradebook:
    """Return every learner's row of ``course`` on every item of its assignments (course staff only)."""
    membership.require_course_role(session=session, course=course, user=viewer, roles=membership.STAFF)
    chosen = _assignments(session, course, published_only=False)
    learners = [m.user for m in membership.members(session=session, course=course, role=CourseRole.learner)]
    rows = _rows(session, chosen, learners)
    return Gradebook(course.id, _heads(chosen), _columns(chosen), tuple(rows))


def my_grades(*, session: Session, course: Course, user: User) -> LearnerGrades:
    """Return ``user``'s own row of ``course`` on its published assignments (any member)."""
    membership.require_course_role(session=session, course=course, user=user, roles=membership.ANY_ROLE)
    chosen = _assignments(session, course, published_only=True)
    (row,) = _rows(session, chosen, [user])
    return row


# --- overrides ----------------------------------------------------------------------------------------------------


def _comment(text: str) -> str:
    why = text.strip()
    problem = f"say why, in 1 to {MAX_COMMENT_CHARS} characters (it is kept in the audit list)"
    if not why or len(why) > MAX_COMMENT_CHARS or "\x00" in why:
        raise InvalidInput(problem)
    try:
        why.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate from a JSON escape has no UTF-8 form
        raise InvalidInput(f"{problem}; this is not valid text") from None
    return why


def _require_learner(session: Session, course: Course, user: User) -> None:
    role = session.scalar(
        select(CourseMember.role).where(CourseMember.course_id == course.id, CourseMember.user_id == user.id)
    )
    if role is not CourseRole.learner:
        raise InvalidInput(f"{user.email} is not a learner of {course.title!r}")


def override(
    *,
    session: Session,
    course: Course,
    item: AssignmentItem,
    learner: User,
    score_pct: float,
    comment: str,
    actor: User,
) -> GradeOverride:
    """Replace ``learner``'s score on ``item`` with ``score_pct`` (0..100), saying why (course staff only)."""
    membership.require_course_role(session=session, course=course, user=actor, roles=membership.STAFF)
    if item.assignment.course_id != course.id:
        raise NotFound(f"no item {item.id} in the course {course.title!r}")
    membership.require_open(course)
    _require_learner(session, course, learner)
    if not math.isfinite(score_pct) or not 0 <= score_pct <= 100:
        raise InvalidInput("the score must be a percentage from 0 to 100")
    row = GradeOverride(
        item_id=item.id, user_id=learner.id, score_pct=float(score_pct), comment=_comment(comment),
        created_by_id=actor.id,
    )  # fmt: skip
    before = assignments.current_override(session=session, item=item, user=learner)
    session.add(row)
    session.flush()
    trail.record(
        session=session, action=Action.override_set, actor=actor, course_id=course.id, subject_id=learner.id,
        target=_cell_name(item), before=None if before is None else {"score_pct": before.score_pct},
        after={"score_pct": row.score_pct, "override": row.id},
    )  # fmt: skip
    return row


def _cell_name(item: AssignmentItem) -> str:
    return f"assignment {item.assignment_id} ({item.assignment.title[:60]}), item {item.exercise.slug}"


def revert_override(*, session: Session, override_id: int, actor: User) -> GradeOverride:
    """Mark the override ``override_id`` reverted, keeping the row (course staff only)."""
    missing = NotFound(f"no grade override {override_id}")
    row = session.get(GradeOverride, override_id) if 0 < override_id <= MAX_ID else None
    if row is None:
        raise missing
    item = session.get(AssignmentItem, row.item_id)
    if item is None:  # the foreign key cascades: never, but say so rather than fail on None
        raise missing
    try:
        membership.require_course_role(
            session=session, course=item.assignment.course, user=actor, roles=membership.STAFF
        )
    except NotFound:
        raise missing from None  # an outsider learns nothing about the course either
    membership.require_open(item.assignment.course)
    if row.reverted_at is None:
        row.reverted_at, row.reverted_by_id = utcnow(), actor.id
        session.flush()
        trail.record(
            session=session, action=Action.override_revert, actor=actor, course_id=item.assignment.course_id,
            subject_id=row.user_id, target=_cell_name(item),
            before={"score_pct": row.score_pct, "override": row.id}, after={"reverted": True},
        )  # fmt: skip
    return row


def override_history(*, session: Session, course: Course, viewer: User) -> list[OverrideEntry]:
    """Return every override of ``course``'s cells, reverted ones too, newest first (course staff only)."""
    membership.require_course_role(session=session, course=course, user=viewer, roles=membership.STAFF)
    learner, author, reverter = aliased(User), aliased(User), aliased(User)
    stmt = (
        select(GradeOverride, Assignment.title, Exercise.slug, learner.email, author.email, reverter.email)
        .join(AssignmentItem, AssignmentItem.id == GradeOverride.item_id)
        .join(Assignment, Assignment.id == AssignmentItem.assignment_id)
        .join(Exercise, Exercise.id == AssignmentItem.exercise_id)
        .join(learner, learner.id == GradeOverride.user_id)
        .outerjoin(author, author.id == GradeOverride.created_by_id)
        .outerjoin(reverter, reverter.id == GradeOverride.reverted_by_id)
        .where(Assignment.course_id == course.id)
        .order_by(GradeOverride.created_at.desc(), GradeOverride.id.desc())
    )
    entries: list[OverrideEntry] = []
    seen: set[tuple[int, int]] = set()
    for o, title, slug, learner_email, by, reverted_by in session.execute(stmt):
        cell = (o.item_id, o.user_id)
        # Newest first: the first unreverted override of a cell is the one that counts.
        in_force = o.reverted_at is None and cell not in seen
        if in_force:
            seen.add(cell)
        reverted_at = as_utc(o.reverted_at) if o.reverted_at is not None else None
        entries.append(
            OverrideEntry(
                id=o.id, item_id=o.item_id, assignment=title, exercise=slug, learner=learner_email,
                score_pct=o.score_pct, comment=o.comment, by=by, at=as_utc(o.created_at),
                reverted_at=reverted_at, reverted_by=reverted_by, in_force=in_force,
            )
        )  # fmt: skip
    return entries


# --- CSV ------------------------------------------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"


def _flags(cell: Cell) -> str:
    return "".join(letter for letter, name in FLAGS if getattr(cell, name))


def gradebook_csv(book: Gradebook) -> str:
    """Return ``book`` as CSV text, one row per learner, safe to open in a spreadsheet."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    header = ["email", "name"]
    for column in book.columns:
        header += [column.label, f"{column.label} flags"]
    header += [f"{head.title} %" for head in book.assignments] + ["total %"]
    writer.writerow([csv_cell(h) for h in header])
    for row in book.rows:
        values = [row.email, row.name]
        for cell in row.cells:  # in the columns' order
            values += [_pct(cell.score_pct), _flags(cell)]
        values += [_pct(row.assignment_pct[head.id]) for head in book.assignments] + [_pct(row.total_pct)]
        writer.writerow([csv_cell(v) for v in values])
    return out.getvalue()
