"""The Celery application: Redis broker, queues ``cpu`` and ``gpu``, late acks.

Contract: tasks are acknowledged only after they finish (``acks_late``) and rejected back to the queue if
the worker process dies, so a message is never lost; the task itself is idempotent (see ``worker.tasks``).
The broker's visibility timeout is longer than any grading lease, so a redelivered message finds the lease
of a dead worker expired and grades again.
"""

from __future__ import annotations

from celery import Celery
from kombu import Queue

from app.config import Settings, get_settings

QUEUES = ("cpu", "gpu")
GRADE_TASK = "gpulab.grade_submission"


def make_celery(settings: Settings | None = None) -> Celery:
    """Build the Celery app for ``settings.broker_url``."""
    settings = settings or get_settings()
    celery = Celery("gpulab", broker=settings.broker_url, include=["worker.tasks"])
    celery.conf.update(
        task_queues=[Queue(name) for name in QUEUES],
        task_default_queue="cpu",
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        broker_transport_options={"visibility_timeout": settings.grading_lease_s * 2},
        # A hard ceiling above the sandbox's own limits: if everything else fails, the worker is not stuck.
        task_time_limit=int(settings.grading_lease_s),
        worker_hijack_root_logger=False,
    )
    return celery


celery_app = make_celery()
