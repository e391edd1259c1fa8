"""Job threads of the embedded mode: checks and similarity runs, one at a time each, in this process.

Contract: ``CheckRunner`` and ``SimilarityRunner`` are what ``app.jobs.dispatch.InProcessDispatcher`` starts work on
when no broker is set; a Celery worker runs the same domain functions (``run_check``, ``run_similarity``) from its
tasks. Each runs one job at a time in a daemon pool thread; the job's row shows its progress.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from app.domain.exercises.checks import SessionFactory, fail_check, run_check
from app.domain.review.similarity_runs import run_similarity
from app.settings import Settings
from worker.grading.sandbox.base import Sandbox


class CheckRunner:
    """Runs checks one at a time in a background thread of this process (the embedded default)."""

    def __init__(
        self, factory: SessionFactory, sandbox_factory: Callable[[], Sandbox], settings: Settings | None = None
    ) -> None:
        self._factory = factory
        self._sandbox_factory = sandbox_factory
        self._settings = settings
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpulab-check")

    def start(self, check_id: int) -> None:
        """Queue the check; its row shows the progress."""
        self._pool.submit(self._run, check_id)

    def _run(self, check_id: int) -> None:
        try:
            sandbox = self._sandbox_factory()
        except Exception as exc:
            fail_check(self._factory, check_id, str(exc))
            return
        run_check(check_id, factory=self._factory, sandbox=sandbox, settings=self._settings)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class SimilarityRunner:
    """Runs similarity checks one at a time in a background thread of this process (the embedded default)."""

    def __init__(self, factory: SessionFactory) -> None:
        self._factory = factory
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpulab-similarity")

    def start(self, run_id: int) -> None:
        self._pool.submit(run_similarity, run_id, factory=self._factory)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
