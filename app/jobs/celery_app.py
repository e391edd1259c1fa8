"""The Celery application: Redis broker, queues ``cpu`` and ``gpu``, late acks.

Contract: tasks are acknowledged only after they finish (``acks_late``) and rejected back to the queue if
the worker process dies, so a message is never lost; the task itself is idempotent (see ``app.jobs.tasks``).
A worker killed outright (SIGKILL, a node lost) leaves its messages unacknowledged in Redis until the
visibility timeout: the sweeper (``app.jobs.sweeper``, run by every worker, see ``app.jobs.lifecycle``) does not wait
for that, it re-dispatches the submission once its lease expires. A message redelivered later finds the
submission graded and is dropped. ``broker_backlog`` reads which submissions each queue holds (or only how
many, for a very long queue), so the sweeper can tell a long queue from a lost one.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from celery import Celery
from kombu import Queue

from app.domain.platform.queues import QUEUES
from app.settings import Settings, get_settings

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
    tasks = [
        "app.jobs.tasks",
        "app.jobs.lifecycle",
        "app.jobs.example_tasks",
        "app.jobs.check_tasks",
        "app.jobs.similarity_tasks",
    ]
    celery = Celery("gpulab", broker=settings.broker_url, include=tasks)
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


SCAN_LIMIT = 10_000  # longer queues are judged by their length alone (reading them whole costs too much)


def _submission_id(payload: Any) -> str | None:
    """Return the submission id a grading message carries (Celery's JSON protocol 2 body), or None."""
    try:
        message = json.loads(payload) if isinstance(payload, (str, bytes)) else payload
        if isinstance(message, list):  # an unacked entry: [message, exchange, routing_key]
            message = message[0]
        if message.get("headers", {}).get("task") != GRADE_TASK:
            return None
        args = json.loads(base64.b64decode(message["body"]))[0]
        return str(args[0])
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        return None


@dataclass
class Backlog:
    """What the broker holds for one queue: its length and, when short enough to read, the ids in it."""

    length: int
    ids: set[str] | None


def broker_backlog(connection: Any, queues: tuple[str, ...]) -> dict[str, Backlog]:
    """Return, per queue, the grading messages Redis holds: waiting in its list plus delivered, not acknowledged."""
    client = connection.default_channel.client
    backlog: dict[str, Backlog] = {}
    for queue in queues:
        length = int(client.llen(queue))
        ids = None
        if length <= SCAN_LIMIT:
            ids = {sid for sid in map(_submission_id, client.lrange(queue, 0, -1)) if sid}
        backlog[queue] = Backlog(length=length, ids=ids)
    for raw in client.hvals("unacked"):  # kombu's Redis transport keeps delivered messages here until acked
        try:
            routing_key = json.loads(raw)[2]
        except (ValueError, IndexError, TypeError):
            continue
        entry = backlog.get(routing_key)
        if entry is not None:
            entry.length += 1
            sid = _submission_id(raw)
            if entry.ids is not None and sid:
                entry.ids.add(sid)
    return backlog


celery_app = make_celery()
