"""Hand stored submissions to graders: an in-process pool by default, Celery when a broker is set.

Contract:
- ``dispatch(submission_id, queue)`` is called only after the submission row is committed.
- ``InProcessDispatcher`` grades in a bounded thread pool inside the API process (FIFO, so submissions are
  graded in the order they arrived); ``CeleryDispatcher`` sends the id to the ``cpu`` or ``gpu`` queue.
- ``recover_unfinished`` re-dispatches every submission left queued, and every running one whose lease
  expired, so nothing accepted is ever lost across restarts. In-process mode owns every running row (no
  other process grades), so it takes them all back at start-up.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Protocol

from app.config import Settings, get_settings
from app.db import session_scope
from app.models import SubmissionStatus
from app.submissions import unfinished

log = logging.getLogger(__name__)


class Dispatcher(Protocol):
    name: str
    owns_all_running: bool

    def dispatch(self, submission_id: str, queue: str) -> None: ...

    def shutdown(self) -> None: ...


class InProcessDispatcher:
    name = "in-process"
    owns_all_running = True

    def __init__(self, workers: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpulab-grade")
        self._pending: set[Future[object]] = set()
        self._lock = threading.Lock()

    def dispatch(self, submission_id: str, queue: str) -> None:
        """Queue the grading in this process's pool."""
        from worker.tasks import grade_submission  # the worker side is imported only when grading here

        future: Future[object] = self._pool.submit(grade_submission, submission_id)
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._done)

    def _done(self, future: Future[object]) -> None:
        with self._lock:
            self._pending.discard(future)
        if future.exception() is not None:
            log.error("in-process grading failed", exc_info=future.exception())

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every dispatched grading finished; return False on timeout."""
        with self._lock:
            pending = list(self._pending)
        for future in pending:
            try:
                future.result(timeout=timeout_s)
            except TimeoutError:
                return False
            except Exception:  # already logged by _done
                log.debug("grading raised", exc_info=True)
        return True

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class CeleryDispatcher:
    name = "celery"
    owns_all_running = False

    def __init__(self, settings: Settings) -> None:
        from worker.celery_app import make_celery

        self._celery = make_celery(settings)

    def dispatch(self, submission_id: str, queue: str) -> None:
        """Send the id to the queue; a duplicate message is harmless because grading claims first."""
        from worker.celery_app import GRADE_TASK, QUEUES

        self._celery.send_task(GRADE_TASK, args=[submission_id], queue=queue if queue in QUEUES else "cpu")

    def shutdown(self) -> None:
        self._celery.close()


_dispatcher: Dispatcher | None = None
_dispatcher_lock = threading.Lock()


def make_dispatcher(settings: Settings) -> Dispatcher:
    """Return Celery's dispatcher, or the in-process one, whose gradings start warming their templates now."""
    if settings.broker_url:
        return CeleryDispatcher(settings)
    from worker.prewarm import prewarm_in_background  # grading happens in this process: warm it up

    prewarm_in_background(settings)
    return InProcessDispatcher(settings.grading_workers)


def get_dispatcher() -> Dispatcher:
    """Return the process-wide dispatcher for the current settings."""
    global _dispatcher
    with _dispatcher_lock:
        if _dispatcher is None:
            _dispatcher = make_dispatcher(get_settings())
        return _dispatcher


def reset_dispatcher() -> None:
    """Shut the process-wide dispatcher down (tests and shutdown)."""
    global _dispatcher
    with _dispatcher_lock:
        if _dispatcher is not None:
            _dispatcher.shutdown()
        _dispatcher = None


def recover_unfinished(dispatcher: Dispatcher) -> int:
    """Dispatch again what was accepted but never graded; return how many."""
    lease_s = 0.0 if dispatcher.owns_all_running else get_settings().grading_lease_s
    with session_scope() as session:
        rows = unfinished(session=session, lease_s=lease_s)
        if dispatcher.owns_all_running:
            for row in rows:  # claim() only takes queued rows or expired leases; free them all first
                row.status = SubmissionStatus.queued
                row.started_at = None
        jobs = [(row.id, row.exercise_version.queue) for row in rows]
    for submission_id, queue in jobs:
        dispatcher.dispatch(submission_id, queue)
    if jobs:
        log.info("re-dispatched %d unfinished submissions", len(jobs))
    return len(jobs)
