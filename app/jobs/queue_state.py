"""What the admin dashboard shows of the grading queues: waiting work per queue and the workers serving each.

Contract: ``queue_state(session=..., settings=...)`` never raises and never hangs the page: in-process mode
reads only the database; Celery mode also asks Redis for queue lengths and the workers for their active
queues, each under ``PROBE_TIMEOUT_S``, and says in ``notes`` what did not answer.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.models import ExerciseVersion, Submission, SubmissionStatus
from app.settings import Settings

PROBE_TIMEOUT_S = 1.0


@dataclass
class QueueState:
    mode: str
    queues: dict[str, int | None]
    workers: dict[str, int | None]
    notes: list[str] = field(default_factory=list)


def queued_in_db(*, session: Session) -> dict[str, int]:
    """Count queued and running submissions per grading queue."""
    stmt = (
        select(ExerciseVersion.queue, Submission.status)
        .join(ExerciseVersion, Submission.exercise_version_id == ExerciseVersion.id)
        .where(Submission.status.in_((SubmissionStatus.queued, SubmissionStatus.running)))
    )
    counts: dict[str, int] = {"cpu": 0, "gpu": 0}
    for queue, _status in session.execute(stmt):
        counts[queue] = counts.get(queue, 0) + 1
    return counts


def queue_state(*, session: Session, settings: Settings) -> QueueState:
    """Describe queue depth and workers: the pool and the database in-process, Redis and Celery otherwise."""
    waiting = queued_in_db(session=session)
    if not settings.broker_url:
        return QueueState(
            mode="in-process",
            queues={q: n for q, n in waiting.items()},
            workers={"cpu": settings.grading_workers, "gpu": settings.grading_workers},
            notes=["one pool of grading threads inside the web process serves both queues; counts are queued "
                   "or running submissions in the database"],
        )  # fmt: skip
    state = QueueState(mode="celery", queues={"cpu": None, "gpu": None}, workers={"cpu": None, "gpu": None})
    # A daemon thread and a hard deadline: a broker that accepts connections but never answers must not hang
    # the page (kombu may retry a broadcast longer than its own timeouts suggest).
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpulab-probe")
    future = pool.submit(_probe_celery, settings, state)
    try:
        future.result(timeout=3 * PROBE_TIMEOUT_S + 1)
    except FutureTimeout:
        state.notes.append("the broker did not answer in time")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    state.notes.append(f"database: {waiting.get('cpu', 0)} cpu and {waiting.get('gpu', 0)} gpu submissions waiting")
    return state


def _probe_celery(settings: Settings, state: QueueState) -> None:
    """Fill ``state`` from Redis queue lengths and the workers' active queues."""
    try:
        import redis

        client = redis.Redis.from_url(
            settings.broker_url, socket_timeout=PROBE_TIMEOUT_S, socket_connect_timeout=PROBE_TIMEOUT_S
        )
        for queue in ("cpu", "gpu"):
            state.queues[queue] = int(client.llen(queue))
    except Exception as exc:
        state.notes.append(f"Redis did not answer: {type(exc).__name__}")
        return  # asking Celery over the same unreachable broker would only wait longer
    try:
        from app.jobs.celery_app import make_celery

        app = make_celery(settings)
        active = app.control.inspect(timeout=PROBE_TIMEOUT_S).active_queues() or {}
        for queue in ("cpu", "gpu"):
            state.workers[queue] = sum(1 for qs in active.values() if any(q.get("name") == queue for q in qs))
        app.close()
    except Exception as exc:
        state.notes.append(f"Celery workers did not answer: {type(exc).__name__}")
