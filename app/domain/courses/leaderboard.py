"""An assignment's leaderboard of one exercise: its learners' best passing measurement, ranked, under pseudonyms.

Contract:
- A board exists for an (assignment, exercise) pair when the exercise's current version opts in (``[leaderboard]``
  in ``exercise.toml``: ``worker.bank.specdata.Leaderboard``), the assignment holds the exercise and its
  instructor left ``Assignment.leaderboard`` on (the default: the author's opt-in is the deliberate choice, and the
  board shows learners no names). ``board_for`` answers which; ``leaderboard`` refuses any other pair with
  ``NotFound``, as it refuses anyone who holds no role in the assignment's course.
- What ranks: among the course's current learners, each one's submissions under the assignment to any version of the
  exercise that count (``assignments.countable``) and **passed** (a failed run's figure may come from broken code).
  Of those, the measurement named ``metric`` with a value, recorded by a test whose tier is ``now`` in the version it
  was graded against (a board must not show what a tier holds back). Each learner's best value ranks (``order``),
  the earliest submission of equal ones. Rows are sorted by value, then time, then learner; equal values share a
  rank (1, 1, 3).
- Pseudonyms (``pseudonym``): an HMAC-SHA256, under the server's secret (``Settings.session_secret``), of the course
  and the learner, read as an adjective, an animal and three digits. Stable for as long as the secret is, different
  per course, and nothing a learner can read (an e-mail, an id) lets them compute another's. Two learners of a board
  that draw the same words are told apart by a suffix in learner order.
- Who sees what: every course member sees ranks, pseudonyms, values and times; a learner's own row is marked
  ``you``; staff of the course (``policy.may_name_learners``) also see each row's name and e-mail. Nothing of the
  board is stored: it is computed from the submissions on each read.
- Functions that take a session take keyword-only arguments, only read, and never commit.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.catalog.specs import spec_of
from app.domain.courses import policy
from app.domain.courses.assignments import countable
from app.domain.models import Assignment, CourseMember, CourseRole, Exercise, Submission, User
from app.domain.platform.clock import as_utc
from app.domain.submissions.lifecycle import of_exercise
from app.settings import get_settings
from worker.bank.specdata import Leaderboard
from worker.core.errors import NotFound
from worker.core.outcome import Verdict

# 64 of each: 64 * 64 * 1000 names, so two learners of a course of hundreds rarely draw the same.
ADJECTIVES = (
    "Amber", "Azure", "Bold", "Brave", "Bright", "Brisk", "Calm", "Clever", "Coral", "Cosmic", "Crisp", "Dapper",
    "Daring", "Dusky", "Eager", "Fabled", "Fair", "Fleet", "Frosty", "Gentle", "Gilded", "Glad", "Golden", "Grand",
    "Hardy", "Hazel", "Humble", "Ivory", "Jade", "Jolly", "Keen", "Kind", "Lively", "Lucky", "Lunar", "Mellow",
    "Merry", "Misty", "Noble", "Nimble", "Olive", "Patient", "Plucky", "Polar", "Proud", "Quick", "Quiet", "Rapid",
    "Rosy", "Ruby", "Rustic", "Sage", "Scarlet", "Silver", "Sly", "Solar", "Steady", "Sunny", "Swift", "Tidy",
    "Valiant", "Vivid", "Witty", "Zesty",
)  # fmt: skip
ANIMALS = (
    "Albatross", "Badger", "Beaver", "Bison", "Bobcat", "Capybara", "Caribou", "Cheetah", "Condor", "Coyote",
    "Crane", "Dingo", "Dolphin", "Eagle", "Egret", "Falcon", "Ferret", "Finch", "Gazelle", "Gecko", "Gibbon",
    "Heron", "Hedgehog", "Ibex", "Ibis", "Jackal", "Jaguar", "Kestrel", "Koala", "Lemur", "Lynx", "Magpie",
    "Marmot", "Meerkat", "Mongoose", "Moose", "Narwhal", "Newt", "Ocelot", "Octopus", "Orca", "Osprey", "Otter",
    "Owl", "Panda", "Pelican", "Penguin", "Puffin", "Quail", "Raven", "Robin", "Salmon", "Seal", "Sparrow",
    "Stoat", "Swan", "Tapir", "Tiger", "Toucan", "Turtle", "Walrus", "Weasel", "Wombat", "Yak",
)  # fmt: skip


@dataclass(frozen=True)
class Row:
    """One learner on a board: their rank, pseudonym, best value and when it was submitted."""

    rank: int
    pseudonym: str
    value: float
    unit: str
    submitted_at: datetime
    you: bool
    submission_id: str | None  # the viewer's own row, or any row for staff
    name: str | None = None  # staff only
    email: str | None = None  # staff only


@dataclass(frozen=True)
class Board:
    """A board as one viewer sees it."""

    assignment: Assignment
    exercise: Exercise
    spec: Leaderboard
    rows: tuple[Row, ...]
    names: bool  # the viewer sees the people behind the pseudonyms

    @property
    def title(self) -> str:
        version = self.exercise.current_version
        return version.title if version is not None else self.exercise.slug


def pseudonym(*, secret: str, course_id: int, user_id: int) -> str:
    """Return the learner's pseudonym in one course: words drawn from a keyed hash, e.g. "Amber Heron 042"."""
    message = "\0".join(("gpulab-pseudonym-v1", str(course_id), str(user_id))).encode()
    digest = hmac.new(secret.encode(), message, hashlib.sha256).digest()
    number = int.from_bytes(digest[2:6], "big") % 1000
    return f"{ADJECTIVES[digest[0] % len(ADJECTIVES)]} {ANIMALS[digest[1] % len(ANIMALS)]} {number:03d}"


def spec_for(exercise: Exercise) -> Leaderboard | None:
    """Return the board the exercise's current version opts in to, or ``None``."""
    version = exercise.current_version
    return spec_of(version).leaderboard if version is not None else None


def board_for(assignment: Assignment, exercise: Exercise) -> Leaderboard | None:
    """Return the board ``exercise`` shows under ``assignment``, or ``None`` (no opt-in, switched off, not held)."""
    if not assignment.leaderboard or all(item.exercise_id != exercise.id for item in assignment.items):
        return None
    return spec_for(exercise)


def _metric(submission: Submission, spec: Leaderboard) -> tuple[float, str] | None:
    """Return the submission's value of the metric and its unit, from a test shown ``now``; ``None`` without."""
    rule = spec_of(submission.exercise_version).test_visibility
    found: list[dict[str, Any]] = submission.measurements or []
    for entry in found:
        value = entry.get("value")
        if entry.get("name") != spec.metric or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if rule.of(str(entry.get("test", ""))) != "now":
            continue
        return float(value), str(entry.get("unit") or "")
    return None


@dataclass(frozen=True)
class _Best:
    user: User
    submission: Submission
    value: float
    unit: str


def _best_per_learner(spec: Leaderboard, submissions: Iterable[Submission]) -> list[_Best]:
    """Keep each learner's best value (submissions oldest first, so the earliest of equals stays)."""
    best: dict[int, _Best] = {}
    for submission in submissions:
        measured = _metric(submission, spec)
        if measured is None or submission.user is None:
            continue
        held = best.get(submission.user.id)
        if held is None or spec.better(measured[0], held.value):
            best[submission.user.id] = _Best(submission.user, submission, *measured)
    return list(best.values())


def _ranked(spec: Leaderboard, found: list[_Best]) -> list[tuple[int, _Best]]:
    """Sort best to worst (time, then learner, among equals) and give equal values one rank."""
    sign = 1.0 if spec.order == "lower" else -1.0
    ordered = sorted(found, key=lambda b: (sign * b.value, as_utc(b.submission.created_at), b.user.id))
    ranked: list[tuple[int, _Best]] = []
    for position, entry in enumerate(ordered, start=1):
        tied = ranked and ranked[-1][1].value == entry.value
        ranked.append((ranked[-1][0] if tied else position, entry))
    return ranked


def _names(secret: str, course_id: int, user_ids: list[int]) -> dict[int, str]:
    """Return each learner's pseudonym, a suffix telling apart those that drew the same words (learner order)."""
    drawn = {uid: pseudonym(secret=secret, course_id=course_id, user_id=uid) for uid in sorted(user_ids)}
    seen: dict[str, int] = {}
    named = {}
    for uid, words in drawn.items():
        seen[words] = seen.get(words, 0) + 1
        named[uid] = words if seen[words] == 1 else f"{words} ({seen[words]})"
    return named


def leaderboard(
    *, session: Session, assignment: Assignment, exercise: Exercise, viewer: User, secret: str | None = None
) -> Board:
    """Return the board of ``exercise`` under ``assignment`` as ``viewer`` sees it; ``NotFound`` if there is none."""
    role = policy.assignment_role(session=session, user=viewer, assignment=assignment)
    spec = board_for(assignment, exercise)
    if role is None or spec is None:
        raise NotFound(f"no leaderboard for {exercise.slug!r} in {assignment.title!r}")
    learners = select(CourseMember.user_id).where(
        CourseMember.course_id == assignment.course_id, CourseMember.role == CourseRole.learner
    )
    stmt = (
        of_exercise(exercise)
        .where(
            Submission.assignment_id == assignment.id,
            Submission.verdict == Verdict.passed,
            Submission.user_id.in_(learners),
            *countable(),
        )
        .order_by(Submission.created_at, Submission.id)
    )
    ranked = _ranked(spec, _best_per_learner(spec, session.scalars(stmt)))
    staff = policy.may_name_learners(session=session, user=viewer, work=assignment)
    names = _names(secret or get_settings().session_secret(), assignment.course_id, [b.user.id for _, b in ranked])
    rows = tuple(_row(rank, b, names[b.user.id], viewer, staff) for rank, b in ranked)
    return Board(assignment=assignment, exercise=exercise, spec=spec, rows=rows, names=staff)


def _row(rank: int, best: _Best, words: str, viewer: User, staff: bool) -> Row:
    mine = best.user.id == viewer.id
    return Row(
        rank=rank, pseudonym=words, value=best.value, unit=best.unit, submitted_at=as_utc(best.submission.created_at),
        you=mine, submission_id=best.submission.id if staff or mine else None,
        name=(best.user.name or None) if staff else None, email=best.user.email if staff else None,
    )  # fmt: skip
