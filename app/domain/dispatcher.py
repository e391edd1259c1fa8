"""The dispatcher port: the one interface through which the platform hands work to graders.

Contract: every piece of work that runs learner code or grades leaves the web process through a ``Dispatcher``:
``dispatch`` a committed submission, ``run_examples`` (the visible tests, answered at once), ``start_check`` an
instructor's committed check, ``start_similarity`` a committed similarity run. ``may_have_lost`` lets the sweeper
ask which stale queued submissions the transport may no longer hold; ``owns_all_running`` says whether this
process grades everything (the embedded mode). Implementations: ``app.jobs.dispatch.InProcessDispatcher``
(threads of this process) and ``CeleryDispatcher`` (queues on Redis). Routes, sweepers and jobs all take this one
type; nothing narrows it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from app.domain.models import ExerciseVersion
    from worker.core.outcome import GradeOutcome


class Dispatcher(Protocol):
    """What hands work to graders (see the module's contract)."""

    name: str
    owns_all_running: bool

    def dispatch(self, submission_id: str, queue: str) -> None:
        """Hand the committed submission ``submission_id`` to the grader of ``queue``."""
        ...

    def may_have_lost(self, stale: list[tuple[str, str]], *, waiting_by_queue: dict[str, int]) -> list[str]:
        """Return the ids among ``stale`` (queued, not picked up for a while) that may never be delivered."""
        ...

    def run_examples(
        self, version: ExerciseVersion, code: str, *, wait_s: float, params: dict[str, Any] | None = None
    ) -> GradeOutcome:
        """Grade ``code`` against the version's example tests and return the outcome."""
        ...

    def start_check(self, check_id: int, queue: str) -> None:
        """Start a committed instructor check."""
        ...

    def start_similarity(self, run_id: int) -> None:
        """Start a committed similarity run."""
        ...

    def shutdown(self) -> None:
        """Stop taking work."""
        ...
