"""Start the warm templates a grading process will need before its first submission arrives.

Contract: ``prewarm_in_background(settings)`` returns at once. Kinds start in the order learners are about to need
them (``app.domain.exercises.demand``: the exercises of open assignments, then by recent submissions), one slot of
every kind before a second of any, so when the memory budget runs out it is the least wanted kinds that wait for
their first job (which may then take the memory of an idle kind: ``worker.grading.sandbox.warm``).

With the ``docker`` sandbox and warm pools it has the worker's pool of container pairs
(``worker/grading/sandbox/docker_warm.py``) make ``size`` pairs for each job shape of the published code exercises,
in the same demand order, one of each shape first, a few at a time in its own background threads (none on GPU
workers, whose jobs run cold with their GPUs); it logs "prewarmed" once they are all up (or failed). When the
``local`` sandbox has warm pools, a daemon thread reads the current versions of the published code exercises,
derives the template keys their jobs will ask for (``WarmPool.keys_for``: each subject's runtime key and its
judge's) and starts the pool's templates for them, one of each key first, then the other slots
(``WarmPool.prewarm``), so no learner waits for a framework import and no template start competes with gradings
later (round-robin uses every slot soon anyway: starting them lazily would only move the same memory and CPU to a
worse moment). Nothing else changes: a template that fails to start is only logged (the first job that needs it
starts it again), and an exercise published later gets its templates on first use, as without prewarming.

A worker may start before its database holds the bank: in ``docker-compose.yml`` the grading host and the API
start together, and the API runs ``db upgrade`` and ``exercises sync`` first, so a worker that looked once found
no table or no published exercise and prewarmed nothing for its whole life. The thread therefore looks again,
from 1 s doubling to every ``RETRY_MAX_S``, until it has warmed something or ``PATIENCE_S`` has passed (a bank of
quizzes only has nothing to warm: one cheap query each time, then it gives up). Memory: every template is
its own process (a torch one holds ~300 MB, a TensorFlow one ~600 MB, not shared between templates): the
bank's distinct keys times ``GPULAB_GRADING_WORKERS``.
"""

from __future__ import annotations

import logging
import threading
import time

from app.domain.catalog.specs import spec_of
from app.domain.exercises.demand import by_demand
from app.domain.models import utcnow
from app.domain.platform.db import session_scope
from app.settings import Settings
from worker.bank.spec import ExerciseSpec
from worker.core.config import SandboxKind

log = logging.getLogger(__name__)
WARMED = (SandboxKind.local, SandboxKind.docker)
PATIENCE_S = 900.0  # how long a worker waits for the bank to appear before it stops looking
RETRY_MAX_S = 30.0
PAIRS_POLL_S = 0.5


def published_specs() -> list[ExerciseSpec]:
    """Return the grading specs of the published exercises' current versions, by demand (``exercises.demand``)."""
    with session_scope() as session:
        found = by_demand(session=session, now=utcnow())
        return [spec_of(e.current_version) for e in found if e.current_version is not None]


def prewarm(settings: Settings) -> int:
    """Start the templates (or container pairs) the published exercises need; return how many kinds."""
    from worker.grading.sandbox import get_sandbox, warm_budget
    from worker.grading.sandbox.docker_warm import WarmDockerSandbox
    from worker.grading.sandbox.warm import parse_runtimes, shared_pool

    runtimes = parse_runtimes(settings.warm_pools)
    if not runtimes or settings.sandbox not in WARMED:
        return 0
    if settings.sandbox is SandboxKind.docker:
        sandbox = get_sandbox(settings)
        if not isinstance(sandbox, WarmDockerSandbox):  # a GPU worker: its jobs run cold, with their GPUs
            return 0
        shapes = sandbox.prewarm(published_specs())
        log.info("warming container pairs for %d job shape(s), %d of each", shapes, sandbox.pool.size)
        while sandbox.pool.prewarming():  # this is the prewarm's own thread: waiting costs nobody
            time.sleep(PAIRS_POLL_S)
        ready = sum(kind["warm"] for kind in sandbox.pool.status())
        log.info("prewarmed %d container pair shape(s): %d pair(s) ready", shapes, ready)
        return shapes
    pool = shared_pool(runtimes, settings.grading_workers, budget=warm_budget(settings), idle_s=settings.warm_idle_s)
    from worker.grading.sandbox.gpus import parse_gpu_ids

    # A GPU node's jobs each get GPULAB_GPUS_PER_JOB GPUs, and their templates are made for that many.
    gpus = settings.gpus_per_job if parse_gpu_ids(settings.gpu_ids) else 0
    keys = pool.keys_for(published_specs(), gpus)
    pool.prewarm(keys)
    log.info("prewarmed %d warm template kind(s), %d of each", len(keys), pool.size)
    return len(keys)


def prewarm_in_background(settings: Settings, *, patience_s: float = PATIENCE_S) -> threading.Thread | None:
    """Run ``prewarm`` in a daemon thread, again until the bank gives it something; return the thread."""
    from worker.grading.sandbox.warm import parse_runtimes

    if settings.sandbox not in WARMED or not parse_runtimes(settings.warm_pools):
        return None

    def run() -> None:
        deadline, delay_s = time.monotonic() + patience_s, 1.0
        while True:
            try:
                if prewarm(settings):
                    return
                why = "no published code exercise yet"
            except Exception as exc:  # never take the server down for a head start
                why = f"{type(exc).__name__}: {str(exc)[:200]}"  # e.g. the tables are not made yet
            if time.monotonic() + delay_s > deadline:
                log.warning("prewarmed nothing (%s); templates start on first use", why)
                return
            log.info("nothing to prewarm yet (%s): looking again in %.0f s", why, delay_s)
            time.sleep(delay_s)
            delay_s = min(delay_s * 2, RETRY_MAX_S)

    thread = threading.Thread(target=run, name="gpulab-prewarm", daemon=True)
    thread.start()
    return thread
