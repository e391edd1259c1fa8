"""Hand stored submissions to graders: an in-process pool by default, Celery when a broker is set.

Contract:
- ``dispatch(submission_id, queue)`` is called only after the submission row is committed.
- ``InProcessDispatcher`` grades in a bounded thread pool inside the API process (FIFO, so submissions are
  graded in the order they arrived); ``CeleryDispatcher`` sends the id to the ``cpu`` or ``gpu`` queue.
- ``recover_unfinished`` re-dispatches every submission left queued, and every running one whose lease
  expired, so nothing accepted is ever lost across restarts. In-process mode owns every running row (no
  other process grades), so it takes them all back at start-up. While running, ``app.jobs.sweeper`` does the same
  periodically, asking ``may_have_lost`` which stale queued submissions the transport may no longer hold.
- ``CeleryDispatcher.dispatch`` fails within about a second when the broker is down (no long publish
  retries): the route keeps the submission queued and the sweeper sends it once the broker is back.
- ``start_similarity(run_id)`` starts a committed similarity run: the in-process dispatcher in its one
  similarity thread, Celery's on the ``cpu`` queue (``app.jobs.similarity_tasks``).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from app.domain.dispatcher import Dispatcher
from app.domain.models import SubmissionStatus
from app.domain.platform.db import session_scope
from app.domain.platform.queues import ALL_QUEUES, QUEUES, grading_queue
from app.domain.submissions.lifecycle import unfinished
from app.settings import Settings, get_settings

if TYPE_CHECKING:
    from celery import Celery

    from app.domain.models import ExerciseVersion
    from app.jobs.celery_app import Backlog
    from worker.core.outcome import GradeOutcome
    from worker.grading.sandbox.base import Sandbox

log = logging.getLogger(__name__)


class InProcessDispatcher:
    name = "in-process"
    owns_all_running = True

    def __init__(self, workers: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpulab-grade")
        self._pending: dict[Future[object], str] = {}
        self._lock = threading.Lock()

    def dispatch(self, submission_id: str, queue: str) -> None:
        """Queue the grading in this process's pool."""
        from app.jobs.tasks import grade_submission  # the worker side is imported only when grading here

        future: Future[object] = self._pool.submit(grade_submission, submission_id)
        with self._lock:
            self._pending[future] = submission_id
        future.add_done_callback(self._done)

    def may_have_lost(self, stale: list[tuple[str, str]], *, waiting_by_queue: dict[str, int]) -> list[str]:
        """Return the stale ids this pool does not hold (it knows exactly what it holds)."""
        with self._lock:
            held = set(self._pending.values())
        return [submission_id for submission_id, _ in stale if submission_id not in held]

    def _done(self, future: Future[object]) -> None:
        with self._lock:
            self._pending.pop(future, None)
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

    def run_examples(
        self, version: ExerciseVersion, code: str, *, wait_s: float, params: dict[str, Any] | None = None
    ) -> GradeOutcome:
        """Grade in the calling thread (the route holds a RunGate slot): examples are short and interactive."""
        from app.domain.exercises.example_runs import run_in_process

        return run_in_process(version, code, params)

    def start_check(self, check_id: int, queue: str) -> None:
        """Run the check in this process's one check thread, made on first use."""
        from app.jobs.threads import CheckRunner

        with self._lock:
            runner: CheckRunner | None = getattr(self, "_check_runner", None)
            if runner is None:
                runner = self._check_runner = CheckRunner(session_scope, _checked_sandbox)
        runner.start(check_id)

    def start_similarity(self, run_id: int) -> None:
        """Run the similarity check in this process's one similarity thread, made on first use."""
        from app.jobs.threads import SimilarityRunner

        with self._lock:
            runner: SimilarityRunner | None = getattr(self, "_similarity_runner", None)
            if runner is None:
                runner = self._similarity_runner = SimilarityRunner(session_scope)
        runner.start(run_id)

    def start_background(self, settings: Settings) -> None:
        """Beat as this process's grading worker and sweep periodically, as a Celery worker does."""
        from app.jobs.heartbeat import process_name
        from app.jobs.sweeper import Duties

        # This process grades everything: both queues and their example-run lanes (runs happen in requests).
        self._duties = Duties.start(self, settings, name=process_name("embedded"), queues=list(ALL_QUEUES))

    def shutdown(self) -> None:
        if getattr(self, "_duties", None) is not None:
            self._duties.stop()
        self._pool.shutdown(wait=False, cancel_futures=True)
        if getattr(self, "_check_runner", None) is not None:
            self._check_runner.shutdown()
        if getattr(self, "_similarity_runner", None) is not None:
            self._similarity_runner.shutdown()


def _checked_sandbox() -> Sandbox:
    """Return this process's sandbox after checking it works (a check says so on its page if not)."""
    from worker.grading.sandbox import get_sandbox

    sandbox = get_sandbox(get_settings())
    sandbox.check()
    return sandbox


class CeleryDispatcher:
    name = "celery"
    owns_all_running = False
    PUBLISH_RETRY = {"max_retries": 2, "interval_start": 0.1, "interval_step": 0.3, "interval_max": 0.5}

    def __init__(self, settings: Settings, celery: Celery | None = None) -> None:
        from app.jobs.celery_app import make_celery

        self._celery = celery or make_celery(settings)

    def dispatch(self, submission_id: str, queue: str) -> None:
        """Send the id to the queue; a duplicate message is harmless because grading claims first."""
        from app.jobs.celery_app import GRADE_TASK

        self._celery.send_task(
            GRADE_TASK, args=[submission_id], queue=grading_queue(queue), retry_policy=self.PUBLISH_RETRY,
        )  # fmt: skip

    def run_examples(
        self, version: ExerciseVersion, code: str, *, wait_s: float, params: dict[str, Any] | None = None
    ) -> GradeOutcome:
        """Send the run to the exercise's fast lane (``examples-cpu``/``examples-gpu``) and wait for its outcome."""
        from app.jobs.example_tasks import run_on_lane

        return run_on_lane(self._celery, version, code, wait_s=wait_s, params=params)

    def start_check(self, check_id: int, queue: str) -> None:
        """Send the check id to the exercise's queue; a duplicate is harmless because the check is claimed first."""
        from app.jobs.check_tasks import CHECK_TASK

        self._celery.send_task(CHECK_TASK, args=[check_id], queue=grading_queue(queue), retry_policy=self.PUBLISH_RETRY)

    def start_similarity(self, run_id: int) -> None:
        """Send the run id to the ``cpu`` queue; a duplicate is harmless because the run is claimed first."""
        from app.jobs.similarity_tasks import SIMILARITY_QUEUE, SIMILARITY_TASK

        self._celery.send_task(SIMILARITY_TASK, args=[run_id], queue=SIMILARITY_QUEUE, retry_policy=self.PUBLISH_RETRY)

    def broker_backlog(self) -> dict[str, Backlog]:
        """Return what the broker holds per queue: waiting plus delivered, not acknowledged."""
        from app.jobs.celery_app import broker_backlog

        with self._celery.connection_for_write() as connection:
            return broker_backlog(connection, QUEUES)

    def may_have_lost(self, stale: list[tuple[str, str]], *, waiting_by_queue: dict[str, int]) -> list[str]:
        """Return the stale ids the broker does not hold (for a queue too long to read: all of its stale ids
        when it holds fewer messages than there are queued rows)."""
        try:
            backlog = self.broker_backlog()
        except Exception:  # broker unreachable: whatever it held may be gone; sending again will tell
            log.warning("could not read the broker's queues", exc_info=True)
            return [submission_id for submission_id, _ in stale]
        lost = []
        for submission_id, queue in stale:
            held = backlog[grading_queue(queue)]
            if held.ids is not None:
                if submission_id not in held.ids:
                    lost.append(submission_id)
            elif held.length < waiting_by_queue.get(queue, 0):
                lost.append(submission_id)
        return lost

    def shutdown(self) -> None:
        self._celery.close()


_dispatcher: Dispatcher | None = None
_dispatcher_lock = threading.Lock()


def make_dispatcher(settings: Settings) -> Dispatcher:
    """Return Celery's dispatcher, or the in-process one: it starts warming its templates, beating and sweeping."""
    if settings.broker_url:
        return CeleryDispatcher(settings)
    from app.jobs.prewarm import prewarm_in_background  # grading happens in this process: warm it up

    prewarm_in_background(settings)
    dispatcher = InProcessDispatcher(settings.grading_workers)
    dispatcher.start_background(settings)
    return dispatcher


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


def release_dispatcher(dispatcher: Dispatcher) -> None:
    """Shut ``dispatcher`` down and, when it is the process-wide one, forget it: the next app makes a fresh one."""
    global _dispatcher
    with _dispatcher_lock:
        if _dispatcher is dispatcher:
            _dispatcher = None
    dispatcher.shutdown()


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
