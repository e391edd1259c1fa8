"""Leases on the rows a job claims (submissions, instructor checks): when one expired, renewing it, keeping it.

Contract: a claimed row is ``running``; its ``attempts`` is the fencing token of the claim and ``heartbeat_at``
the holder's last sign of life (a row without one counts from ``started_at``, one with neither has expired).
- ``expired(model, lease_s=..., now=...)`` is the SQL condition "running, and no sign of life for ``lease_s``".
- ``renew(session=..., model=..., row_id=..., attempt=...)`` moves the heartbeat forward (with any other
  ``values``) only while ``attempt`` holds the row; it says whether it did. The caller commits.
- ``LeaseKeeper(renew, interval_s=..., label=...)`` wraps one job: a daemon thread calls ``renew()`` (one
  whole transaction) every ``interval_s``. A database that does not answer is logged and tried at the next
  tick (a lease outlives three missed beats); a renewal that finds the row taken over ends the thread and
  sets ``lost``. Nothing here raises into the job.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from sqlalchemy import func, or_, update
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from app.domain.models import ExerciseCheck, Submission, utcnow

log = logging.getLogger(__name__)
Leased = type[Submission] | type[ExerciseCheck]


def expired(model: Leased, *, lease_s: float, now: datetime) -> ColumnElement[bool]:
    """Return the SQL condition: a running row of ``model`` whose holder gave no sign of life for ``lease_s``."""
    last_sign = func.coalesce(model.heartbeat_at, model.started_at)
    return (model.status == "running") & or_(last_sign.is_(None), last_sign < now - timedelta(seconds=lease_s))


def renew(*, session: Session, model: Leased, row_id: object, attempt: int, **values: Any) -> bool:
    """Move the heartbeat of the running row forward (and set ``values``); return False if ``attempt`` lost it."""
    result = session.execute(
        update(model)
        .where(model.id == row_id, model.status == "running", model.attempts == attempt)
        .values(heartbeat_at=utcnow(), **values)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


class LeaseKeeper:
    """Call ``renew`` every ``interval_s`` in the background while the ``with`` block runs."""

    def __init__(self, renew: Callable[[], bool], *, interval_s: float, label: str) -> None:
        self.renew = renew
        self.interval_s = interval_s
        self.label = label
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"gpulab-lease-{label}", daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                kept = self.renew()
            except SQLAlchemyError:
                log.warning("could not renew the lease of %s; retrying", self.label, exc_info=True)
                continue
            if not kept:
                log.warning("%s lost its lease: its result will be dropped", self.label)
                self.lost = True
                return
