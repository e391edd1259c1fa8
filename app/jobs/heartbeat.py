"""Signs of life of each grading process, written to the database (a job's own lease is ``app.domain.leases``).

Contract:
- ``ProcessBeat(settings, name, queues)`` upserts this process's ``WorkerBeat`` row every heartbeat interval
  from a daemon thread (busy count and sweeper re-dispatches included), and marks it stopped on ``stop()``.
  ``/readyz``, ``/metrics`` and the admin dashboard read these rows: a process whose row is older than
  ``worker_stale_s`` is dead.
- ``busy`` counts the gradings this process holds now; the grading task keeps it with ``grading_started`` and
  ``grading_finished``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading

from sqlalchemy.exc import SQLAlchemyError

from app.domain.models import WorkerBeat, utcnow
from app.domain.platform.db import session_scope
from app.settings import Settings
from worker.grading.sandbox import gpu_status, warm_status

log = logging.getLogger(__name__)

_busy_lock = threading.Lock()
_busy = 0
_redispatched = 0


def grading_started() -> None:
    """Count one more grading in progress in this process."""
    global _busy
    with _busy_lock:
        _busy += 1


def grading_finished() -> None:
    """Count one grading in progress less."""
    global _busy
    with _busy_lock:
        _busy = max(0, _busy - 1)


def count_redispatched(count: int) -> None:
    """Add ``count`` sweeper re-dispatches to this process's total (shown on its beat)."""
    global _redispatched
    with _busy_lock:
        _redispatched += count


def busy() -> int:
    """Return how many gradings this process holds now."""
    with _busy_lock:
        return _busy


def process_name(kind: str) -> str:
    """Return a name for this grading process that is unique on the cluster: ``kind@host:pid``."""
    return f"{kind}@{socket.gethostname()}:{os.getpid()}"


class ProcessBeat:
    """Upsert this process's ``WorkerBeat`` row every heartbeat interval until ``stop()``."""

    def __init__(self, settings: Settings, *, name: str, queues: list[str]) -> None:
        self.settings = settings
        self.name = name
        self.queues = queues
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> ProcessBeat:
        """Write the first beat now, then keep beating from a daemon thread."""
        self.beat()
        self._thread = threading.Thread(target=self._run, name="gpulab-beat", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.settings.heartbeat_interval_s):
            self.beat()

    def beat(self, *, stopped: bool = False) -> bool:
        """Write the row once; return False (and log) if the database did not answer."""
        now = utcnow()
        try:
            with session_scope() as session:
                row = session.get(WorkerBeat, self.name)
                if row is None:
                    row = WorkerBeat(
                        name=self.name, hostname=socket.gethostname(), pid=os.getpid(), started_at=now,
                        sandbox=self.settings.sandbox.value,
                    )  # fmt: skip
                    session.add(row)
                row.queues = list(self.queues)
                row.busy = busy()
                row.warm = warm_status()
                row.gpus = gpu_status(self.settings)
                with _busy_lock:
                    row.redispatched = _redispatched
                row.last_seen_at = now
                row.stopped_at = now if stopped else None
        except SQLAlchemyError:
            log.warning("could not write the heartbeat of %s; retrying", self.name, exc_info=True)
            return False
        return True

    def stop(self) -> None:
        """Stop beating and mark the row stopped (a clean exit is not a dead worker)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.beat(stopped=True)
