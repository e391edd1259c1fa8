"""Run a learner's code against an exercise's visible example tests, right away and without storing it.

Contract:
- ``RunGate`` bounds these runs: at most ``max_parallel`` at once in this process (a caller waits up to
  ``wait_s`` for a slot, then gets ``RateLimited``) and at most ``per_user`` starts per user in any ``window_s``
  (``RateLimited`` with Retry-After), counted by its ``app.domain.platform.ratelimit.Limiter``, which the API shares with
  every process when a broker is set. A refused run costs the user nothing.
- ``run_examples_now`` checks the code as a submission would (size, NUL), takes a slot and hands the run to
  the dispatcher (``Dispatcher``), which returns the outcome: the in-process one grades in this thread with
  ``run_in_process`` (the embedded default), Celery's sends a job to the exercise's fast lane and waits up to
  ``settings.example_run_wait_s`` (``app.jobs.example_tasks``), so in Celery mode the API never builds a sandbox.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn, Protocol, runtime_checkable

from app.domain.dispatcher import Dispatcher
from app.domain.models import ExerciseVersion
from app.domain.platform.ratelimit import Limiter, Rule
from app.domain.catalog.specs import spec_of
from worker.core import humane
from app.settings import Settings
from worker.core.errors import InvalidInput, PayloadTooLarge, RateLimited
from worker.core.outcome import GradeOutcome

RUNS_PER_USER = 10
WINDOW_S = 60.0
WAIT_FOR_SLOT_S = 30.0


class RunGate:
    """Concurrency bound (this process) plus a per-user moving-window rate limit (a ``Limiter``); thread-safe."""

    def __init__(
        self,
        max_parallel: int,
        per_user: int = RUNS_PER_USER,
        window_s: float = WINDOW_S,
        wait_s: float = WAIT_FOR_SLOT_S,
        limiter: Limiter | None = None,
    ) -> None:
        self.per_user = per_user
        self.window_s = window_s
        self.wait_s = wait_s
        self.rule = Rule("example-runs", per_user, window_s)
        self.limiter = limiter or Limiter()
        self._slots = threading.BoundedSemaphore(max_parallel)

    def _refuse_if_used_up(self, user_id: int) -> NoReturn:
        seconds = self.limiter.retry_after_s(self.rule, str(user_id))
        raise RateLimited(f"too many example runs; try again in {seconds} s", retry_after_s=seconds)

    @contextmanager
    def slot(self, user_id: int) -> Iterator[None]:
        """Hold one run slot for ``user_id``, or raise ``RateLimited``."""
        if not self.limiter.allowed(self.rule, str(user_id)):
            self._refuse_if_used_up(user_id)
        if not self._slots.acquire(timeout=self.wait_s):
            raise RateLimited("the example runner is busy; try again in a few seconds", retry_after_s=5)
        try:
            # Counted only once a slot is held, so a busy refusal costs nothing; a run that raced past the
            # check above is refused here.
            if not self.limiter.hit(self.rule, str(user_id)):
                self._refuse_if_used_up(user_id)
            yield
        finally:
            self._slots.release()


def check_code(code: str, max_bytes: int) -> None:
    """Refuse code a submission would refuse: too large, or holding a NUL character."""
    if (size := len(code.encode("utf-8", errors="surrogatepass"))) > max_bytes:
        raise PayloadTooLarge(humane.code_too_large(size, max_bytes))
    if "\x00" in code:
        raise InvalidInput("code contains a NUL character")


def run_in_process(version: ExerciseVersion, code: str, params: dict[str, Any] | None = None) -> GradeOutcome:
    """Grade ``code`` against the version's example tests in this process's sandbox, in the variant ``params``."""
    from app.settings import get_settings
    from worker.grading.examples import run_examples  # the worker side is loaded only when a run happens
    from worker.grading.sandbox import get_sandbox

    return run_examples(spec_of(version), code, sandbox=get_sandbox(get_settings()), params=params)


def run_examples_now(
    *,
    version: ExerciseVersion,
    code: str,
    user_id: int,
    gate: RunGate,
    settings: Settings,
    runner: Dispatcher,
    params: dict[str, Any] | None = None,
) -> GradeOutcome:
    """Check the code, take a run slot and let ``runner`` grade it against the version's example tests.

    ``params``: the learner's variant (``coursework.run_variant``); ``None``: the default one.
    """
    check_code(code, settings.max_code_bytes)
    if version.kind != "code":
        raise InvalidInput(f"a {version.kind} exercise has no example tests to run")
    with gate.slot(user_id):
        return runner.run_examples(version, code, wait_s=settings.example_run_wait_s, params=params)
