"""Example runs as Celery jobs on a fast lane next to each grading queue: the message, the task, the reply.

Contract:
- ``ExampleRunJob`` is the whole message (JSON, never pickle): an exercise version id, the learner's variant
  (``params``) and the code, capped at
  ``MAX_JOB_CODE_CHARS`` here and at the worker's ``max_code_bytes``. The worker re-reads the version by id
  (versions never change, so specs are cached by id) and grades against its example tests in its own sandbox.
- Runs go to the exercise's lane (``app.domain.platform.queues.lane_for``): a GPU exercise's example runs reach GPU
workers.
- The task returns an ``ExampleRunReply`` (the outcome, or a learner-facing error and its kind). Only
  this task stores a result: in ``lane_backend``, a Redis result backend on the broker's Redis whose keys
  expire after ``RESULT_TTL_S`` (every other task keeps ``ignore_result``).
- ``run_on_lane`` sends the job with ``expires`` = the wait, so a run nobody waits for any more is dropped
  unstarted, and polls the stored result with plain GETs (thread-safe: no pub/sub shared between request
  threads) until ``wait_s``; then it raises ``RunnerUnavailable`` (503, Retry-After). A message is
  acknowledged on receipt: a worker that dies mid-run costs a retry by the learner, not a stale redelivery.
"""

from __future__ import annotations

import functools
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Literal

from celery import Task
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.domain.platform.queues import lane_for
from app.jobs.celery_app import celery_app
from app.settings import get_settings
from worker.core.errors import (
    GpulabError,
    InvalidInput,
    NotFound,
    PayloadTooLarge,
    PlatformError,
    RunnerUnavailable,
)
from worker.core.outcome import GradeOutcome

if TYPE_CHECKING:
    from celery import Celery

    from app.domain.models import ExerciseVersion
    from worker.bank.spec import ExerciseSpec

EXAMPLE_TASK = "gpulab.run_examples"
RESULT_TTL_S = 120
MAX_JOB_CODE_CHARS = 1024 * 1024
RETRY_AFTER_S = 10
POLL_FIRST_S, POLL_MAX_S = 0.02, 0.2


class ExampleRunJob(BaseModel):
    """The message an example run travels as."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    exercise_version_id: int = Field(gt=0)
    code: str = Field(max_length=MAX_JOB_CODE_CHARS)
    # The learner's variant (app.domain.catalog.variants): what the example tests' params fixture holds; {}: the
    # default.
    params: dict[str, int | float | str] = Field(default_factory=dict, max_length=64)


# The learner-facing errors a worker may send back, by the name the reply carries (no HTTP codes on this side).
REPLY_ERRORS: dict[str, type[GpulabError]] = {
    "not_found": NotFound, "invalid_input": InvalidInput, "too_large": PayloadTooLarge,
}  # fmt: skip


class ExampleRunReply(BaseModel):
    """What the task returns: an outcome, or the error (and its kind) the learner should see."""

    outcome: GradeOutcome | None = None  # pydantic checks the dataclass field by field, enums included
    error_kind: Literal["", "not_found", "invalid_input", "too_large", "platform"] = ""
    error: str = ""

    def result(self) -> GradeOutcome:
        """Return the outcome or raise the error as the API would have raised it in-process."""
        if self.outcome is not None:
            return self.outcome
        kind = REPLY_ERRORS.get(self.error_kind, PlatformError)
        raise kind(self.error or "the example run failed on the worker")


_backends: dict[int, Any] = {}
_backends_lock = threading.Lock()


def lane_backend(celery: Celery) -> Any:
    """Return the Redis result backend of example runs for ``celery`` (one per app, made on first use)."""
    from celery.backends.redis import RedisBackend

    with _backends_lock:
        backend = _backends.get(id(celery))
        if backend is None:
            url = str(celery.conf.broker_url or get_settings().broker_url)
            backend = _backends[id(celery)] = RedisBackend(app=celery, url=url, expires=RESULT_TTL_S)
        return backend


class _LaneTask(Task):
    """A task whose result goes to ``lane_backend``, whatever the app's own (disabled) backend is."""

    @property
    def backend(self) -> Any:
        return lane_backend(self.app)

    @backend.setter
    def backend(self, value: Any) -> None:  # Celery assigns the app's backend when it binds the task
        pass


@functools.lru_cache(maxsize=64)
def _spec(version_id: int) -> ExerciseSpec:
    """Return the grading spec of a stored code version (immutable, so cached by id)."""
    from app.domain.catalog.specs import spec_of
    from app.domain.models import ExerciseVersion
    from app.domain.platform.db import session_scope

    with session_scope() as session:
        version = session.get(ExerciseVersion, version_id)
        if version is None:
            raise NotFound(f"exercise version {version_id} does not exist")
        if version.kind != "code":
            raise InvalidInput(f"a {version.kind} exercise has no example tests to run")
        return spec_of(version)


def run_example_job(payload: object) -> dict[str, Any]:
    """Grade one job's code against its example tests in this worker's sandbox; return the reply as JSON."""
    from app.domain.exercises.example_runs import check_code
    from worker.grading.examples import run_examples
    from worker.grading.sandbox import get_sandbox

    try:
        job = ExampleRunJob.model_validate(payload)
    except ValidationError as exc:
        problem = f"invalid example-run job ({exc.error_count()} problems)"
        reply = ExampleRunReply(error_kind="invalid_input", error=problem)
        return reply.model_dump(mode="json")
    settings = get_settings()
    try:
        check_code(job.code, settings.max_code_bytes)
        outcome = run_examples(
            _spec(job.exercise_version_id), job.code, sandbox=get_sandbox(settings), params=job.params or None
        )
    except GpulabError as exc:
        kind = next((name for name, cls in REPLY_ERRORS.items() if isinstance(exc, cls)), "platform")
        return ExampleRunReply(error_kind=kind, error=exc.message).model_dump(mode="json")
    return {"outcome": outcome.to_json()}


@celery_app.task(name=EXAMPLE_TASK, base=_LaneTask, ignore_result=False, acks_late=False)
def run_examples_task(payload: object) -> dict[str, Any]:
    """Celery entry point: one example run."""
    return run_example_job(payload)


def _wait(backend: Any, task_id: str, wait_s: float) -> dict[str, Any] | None:
    """Poll the stored result of ``task_id`` until ``wait_s``; return its meta once ready, else None."""
    deadline = time.monotonic() + wait_s
    interval = POLL_FIRST_S
    while True:
        meta: dict[str, Any] = backend.get_task_meta(task_id, cache=False)
        if meta.get("status") in ("SUCCESS", "FAILURE", "REVOKED"):
            backend.delete(backend.get_key_for_task(task_id))  # read once: free it now, not at expiry
            return meta
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(interval, left))
        interval = min(interval * 1.5, POLL_MAX_S)


def run_on_lane(
    celery: Celery, version: ExerciseVersion, code: str, *, wait_s: float, params: dict[str, Any] | None = None
) -> GradeOutcome:
    """Send the run to the version's fast lane (in the variant ``params``) and wait up to ``wait_s`` for its outcome."""
    job = ExampleRunJob(exercise_version_id=version.id, code=code, params=params or {})
    task_id = uuid.uuid4().hex
    try:
        celery.send_task(
            EXAMPLE_TASK, args=[job.model_dump(mode="json")], queue=lane_for(version.queue), task_id=task_id,
            expires=wait_s, retry_policy={"max_retries": 2, "interval_start": 0.1, "interval_step": 0.3},
        )  # fmt: skip
        meta = _wait(lane_backend(celery), task_id, wait_s)
    except GpulabError:
        raise
    except Exception as exc:  # the broker is unreachable: nothing was sent, nothing is lost
        raise RunnerUnavailable(
            "the example runner cannot be reached right now; try again in a moment", retry_after_s=RETRY_AFTER_S
        ) from exc
    if meta is None:
        raise RunnerUnavailable(
            f"no example runner answered within {wait_s:g} s (the graders are busy); nothing was stored, "
            "try again in a moment",
            retry_after_s=RETRY_AFTER_S,
        )
    if meta["status"] != "SUCCESS":
        raise PlatformError(f"the example run failed on the worker: {meta.get('result')!r}")
    try:
        reply = ExampleRunReply.model_validate(meta["result"])
    except ValidationError as exc:
        raise PlatformError("the worker answered the example run with something unreadable") from exc
    return reply.result()
