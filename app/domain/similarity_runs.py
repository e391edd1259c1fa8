"""Similarity checks as jobs: which submissions a run compares, running it, and reading its results.

Contract:
- ``create_run(session=..., user=..., exercise=... | assignment=..., params=...)`` adds a queued ``SimilarityRun``
  (``InvalidInput`` for bad parameters, a quiz, or an assignment without a code exercise); the caller commits,
  then hands the id to the dispatcher's ``start_similarity(run_id)``: the in-process ``SimilarityRunner`` thread
  in the embedded default, a Celery worker of the ``cpu`` queue at scale (``app.jobs.similarity_tasks``). The API
  never compares code itself.
- What a run compares (``counted_submissions``), per exercise, one submission per learner (site role learner):
  for an exercise, each learner's newest graded, scored submission that is not a platform failure, practice or
  under any assignment; for an assignment, for each code exercise of it, the submission that counts for the
  learner under that assignment's rules (``app.domain.assignments.choose``: best or last, with their dates).
- ``run_similarity(run_id, factory=...)`` claims the run (queued, or running for longer than ``STALE_RUN_S``: its
  worker died) as ``running`` with ``attempts + 1``; a run already done or failed, or running elsewhere, is left
  alone, so a duplicate message or a second call changes nothing. It compares each exercise's submissions with
  ``app.domain.similarity.compare``, the starter code and reference solution of every version they were made
  against excluded as boilerplate, and stores the ``MAX_PAIRS`` highest pairs (``pairs_found`` says how many
  reached the display threshold), the clusters (over every pair found, not only those stored) and ``done``. Any
  error settles the run as ``failed`` with the reason in ``error``; it never raises.
- A similarity is a hint for a person to read both submissions, never a penalty: nothing here touches a grade.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol, runtime_checkable

from sqlalchemy import delete, or_, select, update
from sqlalchemy.orm import Session, selectinload

from app.domain import courses, similarity
from app.domain.assignments import choose, countable, current_extension, dates_from
from app.domain.models import (
    Assignment,
    Exercise,
    ExerciseVersion,
    Role,
    SimilarityPair,
    SimilarityRun,
    Submission,
    User,
    utcnow,
)
from app.domain.similarity import Params
from worker.core.errors import Forbidden, InvalidInput

log = logging.getLogger(__name__)
SessionFactory = Callable[[], AbstractContextManager[Session]]
MAX_PAIRS = 1000  # pairs stored per run, the highest first
STALE_RUN_S = 600.0  # a run still "running" after this long lost its worker: it may be claimed again
SETTLED = ("done", "failed")
MAX_ERROR_CHARS = 2000


@runtime_checkable
class SimilarityStarter(Protocol):
    """What starts a committed similarity run: the dispatchers."""

    def start_similarity(self, run_id: int) -> None: ...


def create_run(
    *,
    session: Session,
    user: User | None,
    params: Params,
    exercise: Exercise | None = None,
    assignment: Assignment | None = None,
) -> SimilarityRun:
    """Add a queued run over ``exercise`` or ``assignment`` (exactly one); the caller commits, then starts it."""
    problems = params.problems()
    if problems:
        raise InvalidInput("; ".join(problems))
    if (exercise is None) == (assignment is None):
        raise InvalidInput("a similarity check is of one exercise or one assignment")
    if exercise is not None and not _is_code(exercise):
        raise InvalidInput(f"{exercise.slug} is not a code exercise: there is no code to compare")
    if assignment is not None and not any(_is_code(item.exercise) for item in assignment.items):
        raise InvalidInput("this assignment has no code exercise to compare")
    run = SimilarityRun(
        exercise_id=exercise.id if exercise else None, assignment_id=assignment.id if assignment else None,
        status="queued", params=params.as_dict(), clusters=[], requested_by_id=user.id if user else None,
    )  # fmt: skip
    session.add(run)
    session.flush()
    return run


def _is_code(exercise: Exercise) -> bool:
    version = exercise.current_version or (exercise.versions[-1] if exercise.versions else None)
    return version is not None and version.kind == "code"


def _learner_submissions(session: Session, exercise_id: int, *conditions: object) -> list[Submission]:
    stmt = (
        select(Submission)
        .join(ExerciseVersion, ExerciseVersion.id == Submission.exercise_version_id)
        .join(User, User.id == Submission.user_id)
        .where(ExerciseVersion.exercise_id == exercise_id, ExerciseVersion.kind == "code", User.role == Role.learner)
        .where(*countable(), *conditions)  # type: ignore[arg-type]
        .options(selectinload(Submission.exercise_version))
        .order_by(Submission.created_at, Submission.id)
    )
    return list(session.scalars(stmt))


def counted_submissions(*, session: Session, run: SimilarityRun) -> dict[int, list[Submission]]:
    """Return, per exercise id, the one submission per learner that the run compares."""
    if run.exercise_id is not None:
        newest: dict[int, Submission] = {}
        for submission in _learner_submissions(session, run.exercise_id):  # oldest first: the newest stays
            newest[submission.user_id or 0] = submission
        return {run.exercise_id: list(newest.values())}
    assignment = session.get(Assignment, run.assignment_id)
    if assignment is None:
        return {}
    chosen: dict[int, list[Submission]] = {}
    for item in assignment.items:
        by_user: dict[int, list[Submission]] = {}
        for submission in _learner_submissions(session, item.exercise_id, Submission.assignment_id == assignment.id):
            by_user.setdefault(submission.user_id or 0, []).append(submission)
        picked = []
        for user_id, rows in by_user.items():
            user = session.get(User, user_id)
            extension = current_extension(session=session, assignment=assignment, user=user) if user else None
            dates = dates_from(assignment, extension)
            counted = choose(assignment=assignment, item=item, dates=dates, submissions=rows, override=None)
            if counted.submission is not None:
                picked.append(counted.submission)
        if picked:
            chosen[item.exercise_id] = picked
    return chosen


def _boilerplate(submissions: list[Submission]) -> list[str]:
    """Return the starter code and reference solution of every version ``submissions`` were made against."""
    texts: dict[str, None] = {}
    for version in {s.exercise_version_id: s.exercise_version for s in submissions}.values():
        for name in ("starter.py", "solution.py"):
            text = version.files.get(name)
            if isinstance(text, str) and text.strip():
                texts[text] = None
    return list(texts)


def claim_run(*, session: Session, run_id: int) -> int | None:
    """Take the run if it is queued or its worker died; return this attempt's number, or None to leave it."""
    now = utcnow()
    result = session.execute(
        update(SimilarityRun)
        .where(
            SimilarityRun.id == run_id,
            or_(
                SimilarityRun.status == "queued",
                (SimilarityRun.status == "running") & (SimilarityRun.started_at < now - timedelta(seconds=STALE_RUN_S)),
            ),
        )
        .values(status="running", attempts=SimilarityRun.attempts + 1, started_at=now, error=None)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return None
    return session.scalar(select(SimilarityRun.attempts).where(SimilarityRun.id == run_id))


@dataclass(frozen=True)
class Outcome:
    """What a run found, before it is stored."""

    submissions: int
    pairs: list[tuple[int, similarity.Pair]]  # (exercise id, pair), highest first
    clusters: list[list[str]]


def compute(*, session: Session, run: SimilarityRun) -> Outcome:
    """Compare what the run covers and return the ranked pairs and clusters (stores nothing)."""
    params = Params(**run.params)
    found: list[tuple[int, similarity.Pair]] = []
    groups: list[list[str]] = []
    total = 0
    for exercise_id, submissions in counted_submissions(session=session, run=run).items():
        total += len(submissions)
        documents = [(s.id, s.code) for s in submissions]
        pairs = similarity.compare(documents, boilerplate=_boilerplate(submissions), params=params)
        found.extend((exercise_id, pair) for pair in pairs)
        groups.extend(similarity.clusters(pairs, threshold=params.cluster_t))
    found.sort(key=lambda item: (-item[1].score, -item[1].tokens, item[1].a, item[1].b))
    groups.sort(key=lambda g: (-len(g), g))
    return Outcome(submissions=total, pairs=found, clusters=groups)


def run_similarity(run_id: int, *, factory: SessionFactory) -> None:
    """Claim one run and carry it out to ``done`` or ``failed``; never raises."""
    try:
        with factory() as session:
            attempt = claim_run(session=session, run_id=run_id)
            if attempt is None:
                session.rollback()
                return  # settled, or running elsewhere
            session.commit()
            run = session.get(SimilarityRun, run_id)
            assert run is not None
            session.refresh(run)  # the claim was written past the session's copy
            outcome = compute(session=session, run=run)
            session.execute(delete(SimilarityPair).where(SimilarityPair.run_id == run_id))  # an earlier try's
            for rank, (exercise_id, pair) in enumerate(outcome.pairs[:MAX_PAIRS], start=1):
                session.add(
                    SimilarityPair(
                        run_id=run_id, rank=rank, exercise_id=exercise_id, submission_a_id=pair.a,
                        submission_b_id=pair.b, score=pair.score, share_a=pair.share_a, share_b=pair.share_b,
                        tokens=pair.tokens,
                        fragments={"a": [list(s) for s in pair.slices_a], "b": [list(s) for s in pair.slices_b]},
                    )
                )  # fmt: skip
            done = {
                "status": "done", "submissions": outcome.submissions, "pairs_found": len(outcome.pairs),
                "clusters": outcome.clusters, "finished_at": utcnow(),
            }  # fmt: skip
            kept = session.execute(
                update(SimilarityRun)
                .where(SimilarityRun.id == run_id, SimilarityRun.status == "running", SimilarityRun.attempts == attempt)
                .values(done)
                .execution_options(synchronize_session=False)
            )
            if kept.rowcount != 1:  # type: ignore[attr-defined]
                session.rollback()  # a newer attempt took it over: its result stands
                return
            session.commit()
    except Exception as exc:
        log.exception("similarity run %s failed", run_id)
        fail_run(factory, run_id, f"{type(exc).__name__}: {exc}")


def fail_run(factory: SessionFactory, run_id: int, message: str) -> None:
    """Settle an unsettled run as ``failed`` with ``message``; never raises."""
    try:
        with factory() as session:
            session.execute(
                update(SimilarityRun)
                .where(SimilarityRun.id == run_id, SimilarityRun.status.not_in(SETTLED))
                .values(status="failed", error=message[:MAX_ERROR_CHARS], finished_at=utcnow())
                .execution_options(synchronize_session=False)
            )
            session.commit()
    except Exception:
        log.exception("could not record the failure of similarity run %s", run_id)


def require_viewer(*, session: Session, run: SimilarityRun, user: User) -> None:
    """Let site instructors and admins see any run, and an assignment's course staff (TAs too) its runs.

    ``Forbidden`` for everyone else: a learner may not know the check exists, but asking is not hidden from them.
    """
    if user.role in (Role.instructor, Role.admin):
        return
    assignment = session.get(Assignment, run.assignment_id) if run.assignment_id is not None else None
    if assignment is not None and courses.is_staff(courses.course_role(session=session, course=assignment.course,
                                                                          user=user)):  # fmt: skip
        return
    raise Forbidden("similarity checks are for the course's instructors and TAs")


def runs_of(
    *, session: Session, exercise: Exercise | None = None, assignment: Assignment | None = None
) -> list[SimilarityRun]:
    """Return the runs of ``exercise`` or ``assignment``, newest first."""
    stmt = select(SimilarityRun).order_by(SimilarityRun.created_at.desc(), SimilarityRun.id.desc())
    if exercise is not None:
        stmt = stmt.where(SimilarityRun.exercise_id == exercise.id)
    if assignment is not None:
        stmt = stmt.where(SimilarityRun.assignment_id == assignment.id)
    return list(session.scalars(stmt))


def pairs_of(*, session: Session, run: SimilarityRun) -> list[SimilarityPair]:
    """Return the run's stored pairs, highest first, with both submissions and their learners loaded."""
    stmt = (
        select(SimilarityPair)
        .where(SimilarityPair.run_id == run.id)
        .options(
            selectinload(SimilarityPair.submission_a).selectinload(Submission.user),
            selectinload(SimilarityPair.submission_b).selectinload(Submission.user),
            selectinload(SimilarityPair.exercise),
        )
        .order_by(SimilarityPair.rank)
    )
    return list(session.scalars(stmt))


def segments(code: str, slices: list[list[int]]) -> list[tuple[str, bool]]:
    """Split ``code`` into ``(text, matched)`` runs by the stored slices (clipped, merged, in order)."""
    cuts: list[tuple[int, int]] = []
    for raw in sorted((int(s), int(e)) for s, e in slices):
        start, end = max(0, raw[0]), min(len(code), raw[1])
        if start >= end:
            continue
        if cuts and start <= cuts[-1][1]:
            cuts[-1] = (cuts[-1][0], max(cuts[-1][1], end))
        else:
            cuts.append((start, end))
    parts: list[tuple[str, bool]] = []
    at = 0
    for start, end in cuts:
        if start > at:
            parts.append((code[at:start], False))
        parts.append((code[start:end], True))
        at = end
    if at < len(code):
        parts.append((code[at:], False))
    return parts


class SimilarityRunner:
    """Runs similarity checks one at a time in a background thread of this process (the embedded default)."""

    def __init__(self, factory: SessionFactory) -> None:
        self._factory = factory
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpulab-similarity")

    def start(self, run_id: int) -> None:
        self._pool.submit(run_similarity, run_id, factory=self._factory)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
