"""Instructor checks as Celery jobs: the task a worker of the exercise's queue (``cpu``/``gpu``) runs.

Contract: the message is the check id alone (JSON, validated here); the worker claims the check, runs it with
its own sandbox and records progress and result through ``app.domain.exercises.checks.run_check`` (claim, fencing,
heartbeat).
A worker killed mid-check loses nothing: the check's heartbeat stops and the sweeper
(``app.domain.exercises.checks.sweep_checks``) sends it again once its lease expired. A duplicate message is dropped by
the
claim. The API process never runs this.
"""

from __future__ import annotations

import logging

from app.domain.platform.db import session_scope
from app.jobs.celery_app import celery_app
from app.settings import get_settings

log = logging.getLogger(__name__)
CHECK_TASK = "gpulab.run_check"


def run_check_job(check_id: object) -> None:
    """Claim and run one check with this worker's sandbox; refuse a message that is not a check id."""
    from app.domain.exercises.checks import fail_check, run_check
    from worker.grading.sandbox import get_sandbox

    if not isinstance(check_id, int) or isinstance(check_id, bool) or check_id < 1:
        log.error("dropping a check job that is not a check id: %r", check_id)
        return
    settings = get_settings()
    try:
        sandbox = get_sandbox(settings)
    except Exception as exc:  # this worker cannot grade at all: say so on the check's page
        fail_check(session_scope, check_id, f"the worker could not start its sandbox: {exc}")
        return
    run_check(check_id, factory=session_scope, sandbox=sandbox, settings=settings)


@celery_app.task(name=CHECK_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_check_task(check_id: object) -> None:
    """Celery entry point: run one instructor check by id."""
    run_check_job(check_id)
