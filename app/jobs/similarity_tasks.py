"""Similarity checks as Celery jobs: the task a worker of the ``cpu`` queue runs.

Contract: the message is the run id alone (JSON, validated here); the worker claims the run and carries it out
through ``app.domain.review.similarity_runs.run_similarity`` (claim first, so a duplicate message is dropped; a failure
is recorded on the run). The API process never runs this.
"""

from __future__ import annotations

import logging

from app.domain.platform.db import session_scope
from app.jobs.celery_app import celery_app

log = logging.getLogger(__name__)
SIMILARITY_TASK = "gpulab.run_similarity"
SIMILARITY_QUEUE = "cpu"  # token comparisons need no GPU


def run_similarity_job(run_id: object) -> None:
    """Claim and run one similarity check; refuse a message that is not a run id."""
    from app.domain.review.similarity_runs import run_similarity

    if not isinstance(run_id, int) or isinstance(run_id, bool) or run_id < 1:
        log.error("dropping a similarity job that is not a run id: %r", run_id)
        return
    run_similarity(run_id, factory=session_scope)


@celery_app.task(name=SIMILARITY_TASK, acks_late=True, reject_on_worker_lost=True, ignore_result=True)
def run_similarity_task(run_id: object) -> None:
    """Celery entry point: run one similarity check by id."""
    run_similarity_job(run_id)
