"""Run ``app.bankcheck.check_exercise`` on a stored version in the background, recording progress as it goes.

Contract:
- ``create_check`` adds a queued ``ExerciseCheck`` (the caller commits, then calls ``CheckRunner.start``).
- ``run_check(check_id, factory=..., sandbox=...)`` grades the solution, ``right/`` and ``wrong/`` variants in
  the real sandbox; after each file it commits the line printed so far, so a page polling the row sees
  progress. It ends ``passed`` (no problems), ``failed`` (problems listed) or ``error`` (the platform failed).
  It never raises.
- ``CheckRunner`` runs checks one at a time in a thread of this process (checks are rare and each one grades
  several files), using the app's own session factory. In Celery mode checks still run here: the API host
  needs a working sandbox for them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager

from sqlalchemy.orm import Session

from app.exercises import spec_of
from app.models import ExerciseCheck, ExerciseVersion, User, utcnow
from worker.sandbox.base import Sandbox

log = logging.getLogger(__name__)
SessionFactory = Callable[[], AbstractContextManager[Session]]
SETTLED = ("passed", "failed", "error")


def create_check(*, session: Session, version: ExerciseVersion, user: User | None) -> ExerciseCheck:
    """Add a queued check of ``version``; ``total`` is how many files it will grade."""
    spec = spec_of(version)
    total = 1 + len(spec.right_solutions) + len(spec.wrong) if spec.kind == "code" else 0
    check = ExerciseCheck(
        exercise_version_id=version.id, status="queued", total=total, lines=[], problems=[],
        requested_by_id=user.id if user else None,
    )  # fmt: skip
    session.add(check)
    session.flush()
    return check


def _update(factory: SessionFactory, check_id: int, **values: object) -> None:
    with factory() as session:
        check = session.get(ExerciseCheck, check_id)
        if check is not None:
            for key, value in values.items():
                setattr(check, key, value)
            session.commit()


def run_check(check_id: int, *, factory: SessionFactory, sandbox: Sandbox) -> None:
    """Run one check to the end, committing progress after every graded file."""
    from app.bankcheck import check_exercise  # grading code is loaded only when a check runs

    with factory() as session:
        check = session.get(ExerciseCheck, check_id)
        if check is None or check.status != "queued":
            return  # already taken (a second start of the same check must not run it twice)
        check.status = "running"
        spec = spec_of(check.exercise_version)
        session.commit()
    lines: list[str] = []

    def echo(line: str) -> None:
        lines.append(line.strip())
        _update(factory, check_id, lines=list(lines))

    try:
        problems = check_exercise(spec, sandbox=sandbox, echo=echo)
    except Exception as exc:  # the platform failed: say so on the page instead of leaving it running
        log.exception("check %s failed", check_id)
        _update(factory, check_id, status="error", problems=[f"{type(exc).__name__}: {exc}"], finished_at=utcnow())
        return
    _update(
        factory, check_id, status="failed" if problems else "passed", problems=problems, lines=lines,
        finished_at=utcnow(),
    )  # fmt: skip


class CheckRunner:
    """Runs checks one at a time in a background thread."""

    def __init__(self, factory: SessionFactory, sandbox_factory: Callable[[], Sandbox]) -> None:
        self._factory = factory
        self._sandbox_factory = sandbox_factory
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpulab-check")

    def start(self, check_id: int) -> None:
        """Queue the check; its row shows the progress."""
        self._pool.submit(self._run, check_id)

    def _run(self, check_id: int) -> None:
        try:
            sandbox = self._sandbox_factory()
        except Exception as exc:
            _update(self._factory, check_id, status="error", problems=[str(exc)], finished_at=utcnow())
            return
        run_check(check_id, factory=self._factory, sandbox=sandbox)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
