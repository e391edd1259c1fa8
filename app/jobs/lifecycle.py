"""What a Celery grading worker does besides its tasks: beat, sweep, and stop cleanly.

Contract (connected to Celery's signals when the worker imports this module, see ``app.jobs.celery_app``):
- ``worker_ready``: the worker writes its ``WorkerBeat`` (name ``celery@host:pid``-style from Celery's
  hostname, the queues it consumes) every heartbeat interval and runs the sweeper (``app.jobs.sweeper``, with
  ``app.domain.exercises.checks.sweep_checks`` for instructor checks) with a Celery dispatcher on its own app, so
  stranded
  work is sent again as long as any worker lives.
- ``worker_shutdown``: both stop; the beat row is marked stopped (an orderly exit is not a dead worker); the
  worker's warm templates and container pairs are closed (``close_warm_pools``), so none outlive it.
- SIGTERM is Celery's warm shutdown: the worker stops taking messages, finishes the gradings it holds (their
  leases keep beating), gives back the messages it had prefetched but not started (kombu restores them to
  the queue on close) and exits. SIGKILL gives nothing back: the leases stop beating and another worker's
  sweeper sends the submissions again once ``grading_lease_s`` passed (see README, Scale-out).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery.signals import worker_ready, worker_shutdown

from app.jobs.dispatch import CeleryDispatcher
from app.jobs.sweeper import Duties
from app.settings import get_settings

log = logging.getLogger(__name__)
_running: dict[str, Duties] = {}


@worker_ready.connect
def start_background(sender: Any = None, **_kwargs: Any) -> None:
    """Start the heartbeat and the sweeper once the worker consumes."""
    settings = get_settings()
    queues = sorted(queue.name for queue in sender.task_consumer.queues) if sender is not None else []
    name = f"{sender.hostname if sender is not None else 'celery'}:{os.getpid()}"
    dispatcher = CeleryDispatcher(settings, celery=sender.app if sender is not None else None)
    _running["duties"] = Duties.start(dispatcher, settings, name=name, queues=queues)
    log.info("worker %s: heartbeat every %.0f s, sweeper every %.0f s", name, settings.heartbeat_interval_s,
             settings.sweep_interval_s)  # fmt: skip


@worker_shutdown.connect
def stop_background(**_kwargs: Any) -> None:
    """Stop the sweeper and mark this worker stopped."""
    duties = _running.pop("duties", None)
    if duties is not None:
        duties.stop()
    from worker.grading.sandbox import close_warm_pools

    close_warm_pools()  # the worker's warm templates and container pairs go with it (docker stop, systemd, Ctrl-C)
