"""The Celery application: Redis broker, queues ``cpu`` and ``gpu``, late acks.

Contract: tasks are acknowledged only after they finish (``acks_late``) and rejected back to the queue if
the worker process dies, so a message is never lost; the task itself is idempotent (see ``worker.tasks``).
A worker killed outright (SIGKILL, a node lost) leaves its messages unacknowledged in Redis until the
visibility timeout: the sweeper (``app.sweeper``, run by every worker, see ``worker.lifecycle``) does not wait
for that, it re-dispatches the submission once its lease expires. A message redelivered later finds the
submission graded and is dropped. ``broker_backlog`` reads how many messages each queue holds, so the
sweeper can tell a long queue from a lost one.
"""

from __future__ import annotations

import json
from typing import Any

from celery import Celery
from kombu import Queue

from app.config import Settings, get_settings

QUEUES = ("cpu", "gpu")
GRADE_TASK = "gpulab.grade_submission"
# The longest a grading task may run before Celery kills it: above every exercise's own time limits, which
# the sandbox enforces twice; only a bug of ours reaches it.
GRADING_TIME_LIMIT_S = 900
# How long Redis keeps a delivered, unacknowledged message before it gives it to another consumer. Longer
# than any grading (a redelivery while the first still runs would only be dropped by the claim, but wastes a
# slot); dead workers are covered sooner by the sweeper.
VISIBILITY_TIMEOUT_S = 2 * GRADING_TIME_LIMIT_S


def make_celery(settings: Settings | None = None) -> Celery:
    """Build the Celery app for ``settings.broker_url``."""
    settings = settings or get_settings()
    celery = Celery("gpulab", broker=settings.broker_url, include=["worker.tasks", "worker.lifecycle"])
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
        broker_transport_options={"visibility_timeout": VISIBILITY_TIMEOUT_S},
        # A hard ceiling above the sandbox's own limits: if everything else fails, the worker is not stuck.
        task_time_limit=GRADING_TIME_LIMIT_S,
        # A broker that is down must not hang a request: connect within seconds, the caller decides the rest.
        broker_connection_timeout=2,
        worker_hijack_root_logger=False,
    )
    return celery


def broker_backlog(connection: Any, queues: tuple[str, ...]) -> dict[str, int]:
    """Return the messages each queue holds in Redis: waiting in its list plus delivered but not acknowledged."""
    client = connection.default_channel.client
    backlog = {queue: int(client.llen(queue)) for queue in queues}
    for raw in client.hvals("unacked"):  # kombu's Redis transport: [payload, exchange, routing_key]
        try:
            routing_key = json.loads(raw)[2]
        except (ValueError, IndexError, TypeError):
            continue
        if routing_key in backlog:
            backlog[routing_key] += 1
    return backlog


celery_app = make_celery()
