"""Run ``worker.grading.bankcheck.check_exercise`` on a stored version as a job, recording progress as it goes.

Contract:
- ``create_check`` adds a queued ``ExerciseCheck`` stamped ``dispatched_at`` (the caller commits, then calls the
  dispatcher's ``start_check(check_id, queue)``): a Celery worker of the exercise's queue in Celery mode, the
  in-process ``CheckRunner`` thread in the embedded default.
- ``run_check(check_id, factory=..., sandbox=..., settings=...)`` first claims the check (``claim_check``:
  queued, or running with an expired heartbeat, becomes running with ``attempts + 1``); that attempt number
  fences every later write, so only the claimant records progress or a result. It grades the solution,
  ``right/`` and ``wrong/`` variants; after each file it commits the lines so far (a polling page sees
  progress), and a thread renews ``heartbeat_at`` every ``heartbeat_interval_s``. It ends ``passed``,
  ``failed`` (problems listed) or ``error`` (the platform failed). It never raises; a run that lost its claim
  stops at its next write.
- ``redispatchable_checks`` is the sweeper's part: queued checks nobody took within ``stale_queued_s`` and
  running ones whose heartbeat is older than ``lease_s`` are stamped ``dispatched_at`` and returned to send
  again (at most once per ``stale_queued_s``); a running one that already had ``max_attempts`` claims
  settles as ``error`` instead. ``sweep_checks`` does all of it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Protocol, runtime_checkable

from sqlalchemy import and_, or_, select, update
from sqlalchemy.orm import Session

from app.domain import leases
from app.domain.leases import LeaseKeeper
from app.domain.dispatcher import Dispatcher
from app.domain.models import ExerciseCheck, ExerciseVersion, User, utcnow
from app.domain.catalog.specs import spec_of
from app.settings import Settings, get_settings
from worker.grading.sandbox.base import Sandbox

log = logging.getLogger(__name__)
SessionFactory = Callable[[], AbstractContextManager[Session]]
SETTLED = ("passed", "failed", "error")
EXHAUSTED = "the check was interrupted {attempts} times (the machine running it stopped); start it again"


class LostClaim(Exception):
    """Another attempt took the check over (this one's heartbeat had expired): stop without writing."""


def create_check(*, session: Session, version: ExerciseVersion, user: User | None) -> ExerciseCheck:
    """Add a queued check of ``version``; ``total`` is how many files it will grade."""
    spec = spec_of(version)
    total = 1 + len(spec.right_solutions) + len(spec.wrong) if spec.kind == "code" else 0
    check = ExerciseCheck(
        exercise_version_id=version.id, status="queued", total=total, lines=[], problems=[],
        requested_by_id=user.id if user else None, dispatched_at=utcnow(),
    )  # fmt: skip
    session.add(check)
    session.flush()
    return check


def claim_check(*, session: Session, check_id: int, lease_s: float, max_attempts: int) -> int | None:
    """Take the check if it is queued or its lease expired; return this attempt's number, or None to skip."""
    now = utcnow()
    result = session.execute(
        update(ExerciseCheck)
        .where(
            ExerciseCheck.id == check_id,
            ExerciseCheck.attempts < max_attempts,
            or_(ExerciseCheck.status == "queued", leases.expired(ExerciseCheck, lease_s=lease_s, now=now)),
        )
        .values(status="running", attempts=ExerciseCheck.attempts + 1, started_at=now, heartbeat_at=now)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return None
    return session.scalar(select(ExerciseCheck.attempts).where(ExerciseCheck.id == check_id))


def _write(factory: SessionFactory, check_id: int, attempt: int, **values: Any) -> bool:
    """Write ``values`` (and a fresh heartbeat) if ``attempt`` still holds the check; say whether it did."""
    with factory() as session:
        kept = leases.renew(session=session, model=ExerciseCheck, row_id=check_id, attempt=attempt, **values)
        session.commit()
        return kept


def run_check(check_id: int, *, factory: SessionFactory, sandbox: Sandbox, settings: Settings | None = None) -> None:
    """Claim one check and run it to the end, committing progress after every graded file."""
    from worker.grading.bankcheck import check_exercise  # grading code is loaded only when a check runs

    settings = settings or get_settings()
    with factory() as session:
        attempt = claim_check(
            session=session, check_id=check_id, lease_s=settings.grading_lease_s, max_attempts=settings.max_attempts
        )
        if attempt is None:
            session.rollback()
            return  # settled, running elsewhere, or exhausted (the sweeper settles that one)
        session.commit()
        check = session.get(ExerciseCheck, check_id)
        assert check is not None
        spec = spec_of(check.exercise_version)
    lines: list[str] = []

    renew = partial(_write, factory, check_id, attempt)
    label = f"check {check_id} attempt {attempt}"
    with LeaseKeeper(renew, interval_s=settings.heartbeat_interval_s, label=label) as beat:

        def echo(line: str) -> None:
            lines.append(line.strip())
            if beat.lost or not _write(factory, check_id, attempt, lines=list(lines)):
                raise LostClaim

        try:
            problems = check_exercise(spec, sandbox=sandbox, echo=echo)
        except LostClaim:
            log.warning("check %s attempt %d lost its claim; the newer attempt finishes it", check_id, attempt)
            return
        except Exception as exc:  # the platform failed: say so on the page instead of leaving it running
            log.exception("check %s failed", check_id)
            problems, status = [f"{type(exc).__name__}: {exc}"], "error"
        else:
            status = "failed" if problems else "passed"
    fields: dict[str, Any] = {"status": status, "problems": problems, "finished_at": utcnow()}
    if status != "error":
        fields["lines"] = lines
    if not _write(factory, check_id, attempt, **fields):
        log.warning("check %s attempt %d lost its claim before recording its result", check_id, attempt)


def fail_check(factory: SessionFactory, check_id: int, message: str) -> None:
    """Settle a check nobody has claimed as ``error`` (its runner could not start: no sandbox)."""
    with factory() as session:
        session.execute(
            update(ExerciseCheck)
            .where(ExerciseCheck.id == check_id, ExerciseCheck.status == "queued")
            .values(status="error", problems=[message], finished_at=utcnow())
            .execution_options(synchronize_session=False)
        )
        session.commit()


def redispatchable_checks(
    *, session: Session, now: datetime, lease_s: float, stale_queued_s: float, max_attempts: int | None = None
) -> list[tuple[int, str]]:
    """Return ``(check_id, queue)`` of checks to send again, stamped ``dispatched_at=now``; settle exhausted ones.

    ``max_attempts`` defaults to ``settings.max_attempts``. The caller commits, then dispatches.
    """
    max_attempts = max_attempts if max_attempts is not None else get_settings().max_attempts
    stale = now - timedelta(seconds=stale_queued_s)
    # Not sent lately (a message sent within stale_queued_s waits its turn), or, for a dead claim, not sent
    # since its last heartbeat (that send is what the dead worker took).
    not_lately = or_(ExerciseCheck.dispatched_at.is_(None), ExerciseCheck.dispatched_at < stale)
    lease_gone = leases.expired(ExerciseCheck, lease_s=lease_s, now=now)
    dead = and_(lease_gone, ExerciseCheck.dispatched_at <= ExerciseCheck.heartbeat_at)
    rows = session.execute(
        select(ExerciseCheck, ExerciseVersion.queue)
        .join(ExerciseVersion, ExerciseVersion.id == ExerciseCheck.exercise_version_id)
        .where(
            or_(
                and_(ExerciseCheck.status == "queued", not_lately),
                dead,
                and_(not_lately, lease_gone),
            )
        )
        .order_by(ExerciseCheck.id)
    ).all()
    jobs: list[tuple[int, str]] = []
    for check, queue in rows:
        if check.status == "running" and check.attempts >= max_attempts:
            check.status, check.finished_at = "error", now
            check.problems = [*check.problems, EXHAUSTED.format(attempts=check.attempts)]
            continue
        check.dispatched_at = now
        jobs.append((check.id, queue))
    session.flush()
    return jobs


def sweep_checks(starter: Dispatcher, settings: Settings, factory: SessionFactory | None = None) -> int:
    """Send again every check ``redispatchable_checks`` names, after committing; return how many."""
    from app.domain.platform.db import session_scope

    with (factory or session_scope)() as session:
        jobs = redispatchable_checks(
            session=session, now=utcnow(), lease_s=settings.grading_lease_s,
            stale_queued_s=settings.stale_queued_s, max_attempts=settings.max_attempts,
        )  # fmt: skip
        session.commit()
    for check_id, queue in jobs:
        try:
            starter.start_check(check_id, queue)
        except Exception:  # the broker is away: the row stays stamped, the next sweep tries again
            log.warning("could not send check %s to %s", check_id, queue, exc_info=True)
    return len(jobs)
