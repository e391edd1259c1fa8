"""What a viewer may see of a submission's test results: the visibility tiers of issue #12.

Contract:
- A test's tier is the one its exercise version's stored ``exercise.toml`` gives it (``[visibility]``,
  ``default_visibility``; ``worker.bank.spec``): ``now``, ``after_due`` or ``never``. A quiz's questions are
  ``now``. A stored ``exercise.toml`` that no longer reads withholds every test from learners (logged): a
  result shown too little can be fixed, one shown too much cannot.
- Staff see everything: admins, and the instructors and TAs (``courses.STAFF``) of the submission's course (its
  assignment's course; the practice course for practice work). A site instructor is staff only of their courses:
  their own work as a learner elsewhere is shown as to any learner. Anyone else (the learner) sees a ``now`` test
  whole; an ``after_due`` test whole once their window on the submission's assignment is closed
  (``assignments.window`` on the owner's ``dates_from``: after the late period when there is one, else after the due
  date; an extension in force moves it), by name and points only before; a ``never`` test by name and points only.
- Quiz answers: a learner's quiz attempt under an assignment shows its questions' feedback but not their
  explanations or model answers (``answers_withheld``; ``message_of`` cuts them and says when they show) while
  the learner has attempts left and their window is open: they show after the last attempt (the limit plus an
  extension's extra attempts) or once the window closes; never before under an assignment without an attempt
  limit and a due date. Practice attempts show everything at once (practice costs nothing).
- No deadline, no reveal: a practice submission (no assignment) or one under an assignment without a due date
  keeps its ``after_due`` tests withheld, so practising an exercise never shows what an instructor holds back
  until a deadline.
- ``ShownTests`` says it per submission: ``withheld`` (the names shown by name and points only),
  ``newly_visible`` (the ``after_due`` tests shown because the deadline passed; always empty for staff) and
  ``reveals_at`` (the deadline after which the withheld ``after_due`` tests show; None when none waits or there
  is no deadline). ``EVERYTHING`` is what staff get. ``app.web.schemas.SubmissionOut.of`` applies it; the
  grade (score, verdict) and the program's own output are not withheld.
- Reads: ``shown_for`` answers a whole list in a fixed number of queries: none for admins; one for the
  ``exercise.toml`` of versions not read before by this process (kept by content hash: a version never
  changes); and only when some listed test is not ``now`` or a quiz was taken under an assignment: one each for
  those assignments, the viewer's staff scope (``policy.work_scope``: their staff courses and the practice
  course), the extensions in force and, for quizzes under an attempt limit, the attempts used.
  Functions take the session keyword-only and only read.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.courses import policy
from app.domain.courses.assignments import Window, dates_from, extensions_in_force, not_platform_failure, window
from app.domain.models import Assignment, ExerciseVersion, Role, Submission, User
from worker.bank.spec import Visibility, read_meta
from worker.core.errors import ExerciseFormatError

log = logging.getLogger(__name__)

EVERY_TEST_NOW = Visibility()
NOTHING_SHOWN = Visibility(default="never")  # a stored exercise.toml that no longer reads
MAX_KEPT = 4096  # rules kept per process; each is a few test ids

_rules: dict[str, Visibility] = {}  # content hash -> tiers of that version


@dataclass(frozen=True)
class ShownTests:
    """What one viewer may see of one submission's test results."""

    withheld: frozenset[str] = frozenset()
    newly_visible: tuple[str, ...] = ()
    reveals_at: datetime | None = None
    answers_withheld: bool = False  # a quiz attempt under an assignment with attempts left, before it closes

    def shows(self, name: str) -> bool:
        """Say whether the test ``name`` is shown whole (outcome, message, points earned)."""
        return name not in self.withheld

    def message_of(self, message: str) -> str:
        """Return a test's ``message`` as shown: a quiz answer's explanation and model answer cut while withheld."""
        if not self.answers_withheld:
            return message
        kept = [part for part in message.split("\n\n") if not part.startswith(ANSWER_PARTS)]
        return "\n\n".join([*kept, ANSWERS_LATER])


EVERYTHING = ShownTests()
ANSWER_PARTS = ("Why: ", "Model answer: ")  # the paragraphs app.domain.submissions.quiz adds that give an answer away
ANSWERS_LATER = "The explanation shows after your last attempt, or once the assignment closes."


def shown_tests(*, session: Session, submission: Submission, viewer: User, now: datetime) -> ShownTests:
    """Return what ``viewer`` may see of ``submission``'s test results at ``now``."""
    return shown_for(session=session, submissions=[submission], viewer=viewer, now=now)[submission.id]


def shown_for(
    *, session: Session, submissions: Sequence[Submission], viewer: User, now: datetime
) -> dict[str, ShownTests]:
    """Return what ``viewer`` may see of each submission's test results at ``now``, by submission id."""
    shown = {s.id: EVERYTHING for s in submissions}
    if viewer.role is Role.admin:  # the policy's every-course scope, known without a query
        return shown
    rules = _rules_of(session, [s.exercise_version for s in submissions])
    quizzes = [s for s in submissions if s.exercise_version.kind == "quiz" and s.assignment_id is not None]
    placed_ids = sorted({s.assignment_id for s in submissions if s.assignment_id is not None})
    assignments = _assignments(session, placed_ids) if placed_ids else {}  # one query for every assignment here
    # An assignment with feedback_after_close holds every test back until the learner's window closes.
    closing = {a.id for a in assignments.values() if a.feedback_after_close}

    def tiered(s: Submission) -> bool:
        return any(rules[s.exercise_version.content_hash].of(t.name) != "now" for t in s.tests)

    held = [s for s in submissions if s.assignment_id in closing or tiered(s)]
    if not held and not quizzes:
        return shown
    under = sorted({s.assignment_id for s in [*held, *quizzes] if s.assignment_id is not None})
    staff = policy.work_scope(session=session, user=viewer)  # whose work the viewer sees as staff
    owners = sorted({s.user_id for s in [*held, *quizzes] if s.user_id is not None})
    extensions = extensions_in_force(session=session, assignment_ids=under, user_ids=owners)
    limited = [s for s in quizzes if getattr(assignments.get(s.assignment_id or 0), "max_attempts", None) is not None]
    used = _attempts_used(session, limited)
    for submission in quizzes:
        holder = assignments.get(submission.assignment_id or 0)
        if holder is None or staff.covers(holder.course_id) or submission.user_id is None:
            continue
        extension = extensions.get((holder.id, submission.user_id))
        closed = window(dates_from(holder, extension), now) is Window.closed
        key = (holder.id, submission.user_id, submission.exercise_version.exercise_id)
        limit = None if holder.max_attempts is None else holder.max_attempts + (
            extension.extra_attempts if extension is not None else 0
        )  # fmt: skip
        last_used = limit is not None and used.get(key, 0) >= limit
        shown[submission.id] = ShownTests(answers_withheld=not (closed or last_used))
    for submission in held:
        assignment = assignments.get(submission.assignment_id) if submission.assignment_id is not None else None
        placed = assignment is not None or submission.assignment_id is None  # in its course, or practice work
        if placed and staff.covers(assignment.course_id if assignment is not None else None):
            continue
        deadline, passed = None, False
        if assignment is not None:
            owner = submission.user_id
            dates = dates_from(assignment, extensions.get((assignment.id, owner)) if owner is not None else None)
            if dates.due_at is not None:  # without a due date the window never closes
                deadline = dates.late_until or dates.due_at
                passed = window(dates, now) is Window.closed
        rule = rules[submission.exercise_version.content_hash]
        shown[submission.id] = _decide(submission, rule, deadline, passed, submission.assignment_id in closing)
    return shown


def _decide(
    submission: Submission, rule: Visibility, deadline: datetime | None, passed: bool, after_close: bool = False
) -> ShownTests:
    """Return what the learner sees of ``submission`` given its deadline and whether it has passed.

    ``after_close``: its assignment holds every test back until the window closes (``feedback_after_close``).
    """
    withheld: set[str] = set()
    newly: list[str] = []
    waiting = False
    for test in submission.tests:
        tier = rule.of(test.name)
        if after_close and tier == "now":
            tier = "after_due"
        if tier == "after_due" and passed:
            newly.append(test.name)
        elif tier != "now":
            withheld.add(test.name)
            waiting = waiting or tier == "after_due"
    return ShownTests(frozenset(withheld), tuple(newly), deadline if waiting else None)


def _rules_of(session: Session, versions: Iterable[ExerciseVersion]) -> dict[str, Visibility]:
    """Return the tiers of each version by content hash, reading only the ``exercise.toml`` not kept yet."""
    rules: dict[str, Visibility] = {}
    missing: dict[int, ExerciseVersion] = {}
    for version in versions:
        if version.kind != "code":
            rules[version.content_hash] = EVERY_TEST_NOW
        elif version.content_hash in _rules:
            rules[version.content_hash] = _rules[version.content_hash]
        else:
            missing[version.id] = version
    if missing:
        # Only exercise.toml: a version's files hold every hidden test, which nothing here needs.
        toml = ExerciseVersion.files["exercise.toml"].as_string()
        stmt = select(ExerciseVersion.id, toml).where(ExerciseVersion.id.in_(sorted(missing)))
        for version_id, text in session.execute(stmt):
            version = missing[version_id]
            rules[version.content_hash] = _read(version, text or "")
        if len(_rules) > MAX_KEPT:
            _rules.clear()
        _rules.update({v.content_hash: rules[v.content_hash] for v in missing.values()})
    return rules


def _read(version: ExerciseVersion, text: str) -> Visibility:
    """Return the tiers ``text`` (a stored ``exercise.toml``) declares; withhold every test if it no longer reads."""
    try:
        # Named by id, not slug: reading the exercise's row for a message would cost a query per version.
        return read_meta(f"version-{version.id}", text).visibility_rule()
    except ExerciseFormatError as exc:
        log.warning("cannot read the visibility tiers, withholding every test from learners: %s", exc)
        return NOTHING_SHOWN


def _attempts_used(session: Session, quizzes: list[Submission]) -> dict[tuple[int, int, int], int]:
    """Return the attempts used per (assignment, learner, exercise) of these quiz attempts (one query)."""
    if not quizzes:
        return {}
    stmt = (
        select(Submission.assignment_id, Submission.user_id, ExerciseVersion.exercise_id, func.count())
        .join(ExerciseVersion, Submission.exercise_version_id == ExerciseVersion.id)
        .where(
            Submission.assignment_id.in_(sorted({s.assignment_id for s in quizzes if s.assignment_id is not None})),
            Submission.user_id.in_(sorted({s.user_id for s in quizzes if s.user_id is not None})),
            ExerciseVersion.exercise_id.in_(sorted({s.exercise_version.exercise_id for s in quizzes})),
            *not_platform_failure(),
        )
        .group_by(Submission.assignment_id, Submission.user_id, ExerciseVersion.exercise_id)
    )
    return {(a, u, e): int(n) for a, u, e, n in session.execute(stmt) if a is not None and u is not None}


def _assignments(session: Session, ids: list[int]) -> dict[int, Assignment]:
    if not ids:
        return {}
    return {a.id: a for a in session.scalars(select(Assignment).where(Assignment.id.in_(ids)))}
