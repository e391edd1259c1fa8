"""Similarity checks as jobs: which submissions a run compares, running it, and reading its results.

Contract:
- ``create_run(session=..., user=..., exercise=... | assignment=..., params=...)`` adds a queued ``SimilarityRun``
  (``InvalidInput`` for bad parameters, a quiz, or an assignment without a code exercise; ``Forbidden`` for an
  exercise's run started by anyone but the practice course's staff: it compares practice work); the caller commits,
  then hands the id to the dispatcher's ``start_similarity(run_id)``: the in-process ``SimilarityRunner`` thread
  in the embedded default, a Celery worker of the ``cpu`` queue at scale (``app.jobs.similarity_tasks``). The API
  never compares code itself.
- What a run compares (``counted_submissions``), per exercise, one submission per learner (site role learner):
  for an exercise, each learner's newest graded, scored practice submission (outside any assignment: the practice
  course's work) that is not a platform failure; for an assignment, for each code exercise of it, the submission
  that counts for the learner under that assignment's rules (``app.domain.courses.assignments.choose``: best or
  last, with their dates).
- ``run_similarity(run_id, factory=...)`` claims the run (queued, or running with a heartbeat older than
  ``grading_lease_s``: its worker died) as ``running`` with ``attempts + 1``, and renews ``heartbeat_at`` every
  ``heartbeat_interval_s`` while it compares (``app.domain.leases.LeaseKeeper``). A run already done or failed,
  or running elsewhere, is left alone, so a duplicate message or a second call changes nothing. It compares each
  exercise's submissions with ``app.domain.review.similarity.compare``, the starter code and reference solution of every
  version they were made against excluded as boilerplate, and stores the ``MAX_PAIRS`` highest pairs
  (``pairs_found`` says how many reached the display threshold), the clusters (over every pair found, not only
  those stored) and ``done``; only the attempt that holds the run writes its result. Any error settles the run as
  ``failed`` with the reason in ``error``; it never raises.
- ``sweep_runs`` is the sweeper's part (every grading process runs it, as for instructor checks): a queued run
  not sent within ``stale_queued_s`` and a running one whose worker died are stamped ``dispatched_at`` and sent
  again; one claimed ``max_attempts`` times fails instead.
- Who sees a run: the staff of its course (``app.domain.courses.policy``; an exercise's run is practice work);
  ``runs_of`` lists only the runs in the viewer's ``WorkScope``.
- A similarity is a hint for a person to read both submissions, never a penalty: nothing here touches a grade.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import partial

from sqlalchemy import ColumnElement, delete, func, or_, select, update
from sqlalchemy.orm import Session, load_only, selectinload

from app.domain.courses import membership, policy
from app.domain.courses.assignments import choose, countable, current_extension, dates_from
from app.domain.courses.policy import WorkScope
from app.domain.dispatcher import Dispatcher
from app.domain.leases import LeaseKeeper
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
from app.domain.review import similarity
from app.domain.review.similarity import Params
from app.settings import Settings, get_settings
from worker.bank.specdata import render_params
from worker.core.errors import Forbidden, InvalidInput

log = logging.getLogger(__name__)
SessionFactory = Callable[[], AbstractContextManager[Session]]
MAX_PAIRS = 1000  # pairs stored per run, the highest first
SETTLED = ("done", "failed")
MAX_ERROR_CHARS = 2000
EXHAUSTED = "the check was interrupted {attempts} times (the machine running it stopped); start it again"

HINT = "A similarity is a hint for a person to read both submissions, never a verdict or a penalty."


def create_run(
    *,
    session: Session,
    user: User | None,
    params: Params,
    exercise: Exercise | None = None,
    assignment: Assignment | None = None,
) -> SimilarityRun:
    """Add a queued run over ``exercise`` or ``assignment`` (exactly one); the caller commits, then starts it."""
    if exercise is not None and user is not None and not may_start(session=session, user=user, exercise=exercise):
        raise Forbidden("an exercise's check compares practice work: it is for the practice course's staff")
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
        dispatched_at=utcnow(),
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
        # Practice work only: the practice course's (its staff read the run); each assignment has its own runs.
        practice = _learner_submissions(session, run.exercise_id, Submission.assignment_id.is_(None))
        for submission in practice:  # oldest first: the newest stays
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
    """Return the starter code and reference solution of every version and variant ``submissions`` were made in.

    An exercise with parameters gives each learner the starter with their own numbers filled in
    (``app.domain.catalog.variants``): each variant's rendering is boilerplate, so two learners are not matched on it.
    """
    texts: dict[str, None] = {}
    for version in {s.exercise_version_id: s.exercise_version for s in submissions}.values():
        made_in = [s for s in submissions if s.exercise_version_id == version.id]
        variants = {json.dumps(s.params or {}, sort_keys=True) for s in made_in}
        for name in ("starter.py", "solution.py"):
            text = version.files.get(name)
            if not (isinstance(text, str) and text.strip()):
                continue
            for variant in sorted(variants):
                texts[render_params(text, json.loads(variant))] = None
    return list(texts)


def _silent(*, lease_s: float, now: datetime) -> ColumnElement[bool]:
    """The SQL condition: a running run whose worker gave no sign of life for ``lease_s`` (it died)."""
    last_sign = func.coalesce(SimilarityRun.heartbeat_at, SimilarityRun.started_at)
    return (SimilarityRun.status == "running") & or_(last_sign.is_(None), last_sign < now - timedelta(seconds=lease_s))


def claim_run(*, session: Session, run_id: int, lease_s: float) -> int | None:
    """Take the run if it is queued or its worker died; return this attempt's number, or None to leave it."""
    now = utcnow()
    result = session.execute(
        update(SimilarityRun)
        .where(SimilarityRun.id == run_id, or_(SimilarityRun.status == "queued", _silent(lease_s=lease_s, now=now)))
        .values(status="running", attempts=SimilarityRun.attempts + 1, started_at=now, heartbeat_at=now, error=None)
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


def _renew(factory: SessionFactory, run_id: int, attempt: int) -> bool:
    """Move the run's heartbeat forward while ``attempt`` holds it (one transaction); say whether it still does."""
    with factory() as session:
        result = session.execute(
            update(SimilarityRun)
            .where(SimilarityRun.id == run_id, SimilarityRun.status == "running", SimilarityRun.attempts == attempt)
            .values(heartbeat_at=utcnow())
            .execution_options(synchronize_session=False)
        )
        session.commit()
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def run_similarity(run_id: int, *, factory: SessionFactory, settings: Settings | None = None) -> None:
    """Claim one run and carry it out to ``done`` or ``failed``, beating while it runs; never raises."""
    settings = settings or get_settings()
    try:
        with factory() as session:
            attempt = claim_run(session=session, run_id=run_id, lease_s=settings.grading_lease_s)
            if attempt is None:
                session.rollback()
                return  # settled, or running elsewhere
            session.commit()
            run = session.get(SimilarityRun, run_id)
            assert run is not None
            session.refresh(run)  # the claim was written past the session's copy
            beat = LeaseKeeper(
                partial(_renew, factory, run_id, attempt), interval_s=settings.heartbeat_interval_s,
                label=f"similarity run {run_id} attempt {attempt}",
            )  # fmt: skip
            with beat:
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


def redispatchable_runs(
    *, session: Session, now: datetime, lease_s: float, stale_queued_s: float, max_attempts: int
) -> list[int]:
    """Return the ids of runs to send again, stamped ``dispatched_at=now``; settle exhausted ones as failed.

    Queued runs not sent within ``stale_queued_s`` (their message may be lost: a broker that was down, a process
    that stopped), and running ones whose heartbeat is older than ``lease_s``, not sent since their last beat
    (their worker died). A run that was claimed ``max_attempts`` times already fails instead. The caller commits,
    then sends.
    """
    stale = now - timedelta(seconds=stale_queued_s)
    not_lately = or_(SimilarityRun.dispatched_at.is_(None), SimilarityRun.dispatched_at < stale)
    last_sign = func.coalesce(SimilarityRun.heartbeat_at, SimilarityRun.started_at)
    dead = _silent(lease_s=lease_s, now=now) & or_(
        SimilarityRun.dispatched_at.is_(None), SimilarityRun.dispatched_at <= last_sign, not_lately
    )
    lost = (SimilarityRun.status == "queued") & not_lately
    rows = session.scalars(select(SimilarityRun).where(or_(lost, dead)).order_by(SimilarityRun.id)).all()
    ids = []
    for run in rows:
        if run.status == "running" and run.attempts >= max_attempts:
            run.status, run.finished_at = "failed", now
            run.error = EXHAUSTED.format(attempts=run.attempts)
            continue
        run.dispatched_at = now
        ids.append(run.id)
    session.flush()
    return ids


def sweep_runs(starter: Dispatcher, settings: Settings, factory: SessionFactory | None = None) -> int:
    """Send again every run ``redispatchable_runs`` names, after committing; return how many."""
    from app.domain.platform.db import session_scope

    with (factory or session_scope)() as session:
        ids = redispatchable_runs(
            session=session, now=utcnow(), lease_s=settings.grading_lease_s, stale_queued_s=settings.stale_queued_s,
            max_attempts=settings.max_attempts,
        )  # fmt: skip
        session.commit()
    for run_id in ids:
        try:
            starter.start_similarity(run_id)
        except Exception:  # the broker is away: the row stays stamped, the next sweep tries again
            log.warning("could not send similarity run %s", run_id, exc_info=True)
    return len(ids)


def require_viewer(*, session: Session, run: SimilarityRun, user: User) -> None:
    """Let the staff of the run's course see it (TAs too; an exercise's run compares practice work: the practice
    course's staff), and admins.

    ``Forbidden`` for everyone else: a learner may not know the check exists, but asking is not hidden from them.
    """
    if not policy.may_view_work(session=session, user=user, work=run):
        raise Forbidden("similarity checks are for the course's instructors and TAs")


def may_start(*, session: Session, user: User, exercise: Exercise) -> bool:
    """Say whether ``user`` may start a check of ``exercise``'s practice work: the practice course's staff."""
    practice = membership.find_practice_course(session=session)
    return policy.staff_role(session=session, user=user, course=practice) is not None


def runs_of(
    *, session: Session, scope: WorkScope, exercise: Exercise | None = None, assignment: Assignment | None = None
) -> list[SimilarityRun]:
    """Return the runs of ``exercise`` or ``assignment`` in ``scope``, newest first."""
    stmt = (
        select(SimilarityRun)
        .where(scope.over(SimilarityRun.assignment_id))
        .order_by(SimilarityRun.created_at.desc(), SimilarityRun.id.desc())
    )
    if exercise is not None:
        stmt = stmt.where(SimilarityRun.exercise_id == exercise.id)
    if assignment is not None:
        stmt = stmt.where(SimilarityRun.assignment_id == assignment.id)
    return list(session.scalars(stmt))


def pairs_of(*, session: Session, run: SimilarityRun) -> list[SimilarityPair]:
    """Return the run's stored pairs, highest first, with both submissions (not their code) and learners loaded."""
    side = (Submission.id, Submission.user_id, Submission.created_at, Submission.params)
    stmt = (
        select(SimilarityPair)
        .where(SimilarityPair.run_id == run.id)
        .options(
            selectinload(SimilarityPair.submission_a).options(load_only(*side), selectinload(Submission.user)),
            selectinload(SimilarityPair.submission_b).options(load_only(*side), selectinload(Submission.user)),
            selectinload(SimilarityPair.exercise),
        )
        .order_by(SimilarityPair.rank)
    )
    return list(session.scalars(stmt))


def _word(char: str) -> bool:
    return char.isalnum() or char == "_"


def segments(code: str, slices: list[list[int]]) -> list[tuple[str, bool]]:
    """Split ``code`` into ``(text, matched)`` runs by the stored slices (clipped, merged, in order).

    A slice that starts or ends inside a name is widened to the whole name: copydetect maps its matches back to
    the text through the filter's offsets, which can land a few characters into a token.
    """
    cuts: list[tuple[int, int]] = []
    for raw in sorted((int(s), int(e)) for s, e in slices):
        start, end = max(0, raw[0]), min(len(code), raw[1])
        if start >= end:
            continue
        while 0 < start < len(code) and _word(code[start]) and _word(code[start - 1]):
            start -= 1
        while end < len(code) and _word(code[end - 1]) and _word(code[end]):
            end += 1
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
