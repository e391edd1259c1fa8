"""Prometheus metrics derived at scrape time from the shared database (and, in Celery mode, Redis).

Contract:
- Every number comes from the database that all API processes and workers share, read when scraped by
  ``GpulabCollector`` (a custom ``prometheus_client`` collector): any API process answers the same, and no
  counter is lost when a process restarts. One aggregate query per metric family (grouped in SQL, never a
  row scan in Python); only the worker heartbeat rows, few by nature, are read whole.
- Families (``METRIC_NAMES``): ``gpulab_gradings_total{queue,verdict}`` counts settled gradings, regraded ones
  included (their archived result still counts), so it only grows; ``gpulab_grading_duration_seconds``
  (``finished_at - started_at`` of settled submissions) and ``gpulab_queue_wait_seconds`` (``started_at -
  created_at`` of started ones) are histograms per queue; ``gpulab_queue_depth`` (queued submissions),
  ``gpulab_oldest_queued_age_seconds``, ``gpulab_running_submissions`` and ``gpulab_stranded_submissions`` (running
  with a heartbeat older than ``settings.grading_lease_s``) are gauges per queue; ``gpulab_workers_live{queue}``
  (example-run lanes included); per worker seen in the last ``WORKER_WINDOW_S`` (or not stopped):
  ``gpulab_worker_up``, ``gpulab_worker_busy``, ``gpulab_worker_last_seen_timestamp_seconds`` and
  ``gpulab_sweeper_redispatches_total`` (its ``redispatched`` count, which restarts at 0 with the worker, as a
  Prometheus counter may). Per live worker and warm kind (``liveness.WarmKind``, from its last beat):
  ``gpulab_warm_slots``, ``gpulab_warm_hits_total``, ``gpulab_warm_misses_total{reason}``,
  ``gpulab_warm_memory_megabytes`` and ``gpulab_warm_cold{reason}`` (1 while the kind has nothing warm: first use,
  budget, failed start, idle, evicted, warming up, used up); per GPU worker ``gpulab_gpus`` and
  ``gpulab_gpus_failed{gpu,reason}``. In Celery mode also ``gpulab_broker_up`` and
  ``gpulab_broker_queue_depth{queue}`` (the Redis list length of each queue and example lane; a lost queue shows 0
  while ``gpulab_queue_depth`` stays up).
- ``gpulab_database_up`` is 0 (and the database families are left out) when a query fails; the scrape
  itself still succeeds, so an alert can tell "database down" from "gpulab down".
- Access (``check_access``): with ``settings.metrics_token`` set, only ``Authorization: Bearer <token>``
  (compared in constant time); unset, only loopback clients that did not come through a proxy (no
  ``Forwarded``/``X-Forwarded-For``/``X-Real-IP``). Nothing here touches the session cookie or CSRF.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.utils import floatToGoString
from sqlalchemy import ColumnElement, Float, String, case, cast, func, or_, select, union_all
from sqlalchemy.orm import Session

from app.domain import leases
from app.domain.models import ExerciseVersion, GradingRecord, Submission, SubmissionStatus, WorkerBeat
from app.domain.operations.liveness import WorkerState, live_per_queue, worker_state
from app.domain.platform.clock import as_utc
from app.domain.platform.queues import ALL_QUEUES, QUEUES
from app.settings import Settings
from worker.core.errors import Forbidden, Unauthorized

# The classic text format: every Prometheus reads it, and every name here is a classic one.
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4
SessionFactory = Callable[[], AbstractContextManager[Session]]
DURATION_BUCKETS_S = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
WAIT_BUCKETS_S = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)
WORKER_WINDOW_S = 24 * 3600
BROKER_TIMEOUT_S = 1.0
PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-real-ip")
SETTLED = (SubmissionStatus.graded, SubmissionStatus.error)
METRIC_NAMES = (
    "gpulab_database_up", "gpulab_gradings_total", "gpulab_grading_duration_seconds", "gpulab_queue_wait_seconds",
    "gpulab_queue_depth", "gpulab_oldest_queued_age_seconds", "gpulab_running_submissions",
    "gpulab_stranded_submissions", "gpulab_workers_live", "gpulab_worker_up", "gpulab_worker_busy",
    "gpulab_worker_last_seen_timestamp_seconds", "gpulab_sweeper_redispatches_total", "gpulab_broker_up",
    "gpulab_broker_queue_depth", "gpulab_warm_slots", "gpulab_warm_hits_total", "gpulab_warm_misses_total",
    "gpulab_warm_memory_megabytes", "gpulab_warm_cold", "gpulab_gpus", "gpulab_gpus_failed",
)  # fmt: skip


# --- access ------------------------------------------------------------------------------------------------


def _is_loopback(host: str | None) -> bool:
    try:
        return host is not None and ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_access(*, settings: Settings, authorization: str | None, client_host: str | None,
                 headers: dict[str, str]) -> None:  # fmt: skip
    """Raise ``Unauthorized`` or ``Forbidden`` unless this scrape may read the metrics."""
    if settings.metrics_token:
        scheme, _, given = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), settings.metrics_token.encode()
        ):
            raise Unauthorized("send Authorization: Bearer <GPULAB_METRICS_TOKEN> to read the metrics")
        return
    proxied = any(h in headers for h in PROXY_HEADERS)
    if proxied or not _is_loopback(client_host):
        raise Forbidden(
            "metrics are served to loopback clients only; set GPULAB_METRICS_TOKEN to scrape from elsewhere"
        )


# --- what the database says --------------------------------------------------------------------------------


@dataclass
class Histogram:
    buckets: list[int]  # cumulative counts, one per bucket bound
    count: int
    total_s: float


@dataclass
class Snapshot:
    now: datetime
    gradings: dict[tuple[str, str], int] = field(default_factory=dict)
    duration: dict[str, Histogram] = field(default_factory=dict)
    wait: dict[str, Histogram] = field(default_factory=dict)
    queued: dict[str, tuple[int, datetime | None]] = field(default_factory=dict)
    running: dict[str, tuple[int, int]] = field(default_factory=dict)  # queue -> (running, stranded)
    workers: list[WorkerBeat] = field(default_factory=list)


def _seconds(session: Session, start: Any, end: Any) -> ColumnElement[float]:
    """Return SQL for ``end - start`` in seconds, clamped at 0 (clocks of different machines may disagree)."""
    if session.get_bind().dialect.name == "postgresql":
        diff: ColumnElement[float] = cast(func.extract("epoch", end - start), Float)
    else:  # SQLite keeps ISO text: julianday() reads it
        diff = (func.julianday(end) - func.julianday(start)) * 86400.0
    return case((diff > 0, diff), else_=0.0)


def _histogram(session: Session, *, start: Any, end: Any, statuses: Sequence[SubmissionStatus],
               bounds: Sequence[float]) -> dict[str, Histogram]:  # fmt: skip
    """Bucket ``end - start`` per queue in one grouped query (cumulative counts, as Prometheus wants them)."""
    seconds = _seconds(session, start, end)
    stmt = (
        select(ExerciseVersion.queue, func.count(), func.coalesce(func.sum(seconds), 0.0),
               *(func.sum(case((seconds <= b, 1), else_=0)) for b in bounds))
        .join(ExerciseVersion, Submission.exercise_version_id == ExerciseVersion.id)
        .where(Submission.status.in_(statuses), start.is_not(None), end.is_not(None))
        .group_by(ExerciseVersion.queue)
    )  # fmt: skip
    return {
        queue: Histogram(buckets=[int(n or 0) for n in counts], count=int(count), total_s=float(total))
        for queue, count, total, *counts in session.execute(stmt)
    }


def snapshot(*, session: Session, settings: Settings, now: datetime) -> Snapshot:
    """Read every number the metrics need, one aggregate query per family."""
    snap = Snapshot(now=now)
    verdict = func.coalesce(cast(Submission.verdict, String), cast(Submission.status, String))
    current = (
        select(ExerciseVersion.queue.label("queue"), verdict.label("verdict"))
        .join(ExerciseVersion, Submission.exercise_version_id == ExerciseVersion.id)
        .where(Submission.status.in_(SETTLED))
    )
    archived = select(
        ExerciseVersion.queue.label("queue"),
        func.coalesce(GradingRecord.verdict, GradingRecord.status).label("verdict"),
    ).join(ExerciseVersion, GradingRecord.exercise_version_id == ExerciseVersion.id)
    every = union_all(current, archived).subquery()
    stmt = select(every.c.queue, every.c.verdict, func.count()).group_by(every.c.queue, every.c.verdict)
    snap.gradings = {(q, v): int(n) for q, v, n in session.execute(stmt)}

    snap.duration = _histogram(session, start=Submission.started_at, end=Submission.finished_at, statuses=SETTLED,
                               bounds=DURATION_BUCKETS_S)  # fmt: skip
    snap.wait = _histogram(session, start=Submission.created_at, end=Submission.started_at,
                           statuses=(SubmissionStatus.running, *SETTLED), bounds=WAIT_BUCKETS_S)  # fmt: skip

    stmt = (
        select(ExerciseVersion.queue, func.count(), func.min(Submission.created_at))
        .join(ExerciseVersion, Submission.exercise_version_id == ExerciseVersion.id)
        .where(Submission.status == SubmissionStatus.queued)
        .group_by(ExerciseVersion.queue)
    )
    snap.queued = {q: (int(n), oldest) for q, n, oldest in session.execute(stmt)}

    lease_gone = leases.expired(Submission, lease_s=settings.grading_lease_s, now=now)
    stmt = (
        select(ExerciseVersion.queue, func.count(), func.sum(case((lease_gone, 1), else_=0)))
        .join(ExerciseVersion, Submission.exercise_version_id == ExerciseVersion.id)
        .where(Submission.status == SubmissionStatus.running)
        .group_by(ExerciseVersion.queue)
    )
    snap.running = {q: (int(n), int(s or 0)) for q, n, s in session.execute(stmt)}

    window = now - timedelta(seconds=WORKER_WINDOW_S)
    stmt_w = select(WorkerBeat).where(or_(WorkerBeat.stopped_at.is_(None), WorkerBeat.last_seen_at >= window))
    snap.workers = list(session.scalars(stmt_w.order_by(WorkerBeat.name)))
    return snap


def broker_depths(settings: Settings) -> dict[str, int]:
    """Return the length of each queue's Redis list; raise if Redis does not answer in time."""
    import redis

    client = redis.Redis.from_url(
        settings.broker_url, socket_timeout=BROKER_TIMEOUT_S, socket_connect_timeout=BROKER_TIMEOUT_S
    )
    try:
        return {queue: int(client.llen(queue)) for queue in ALL_QUEUES}
    finally:
        client.close()


# --- the collector -----------------------------------------------------------------------------------------


def _queues(*seen: dict[str, Any]) -> list[str]:
    """Return the known queues plus any other a row names, so every gauge has a 0 where nothing waits."""
    return sorted(set(QUEUES).union(*(d.keys() for d in seen)))


def _histogram_family(name: str, doc: str, data: dict[str, Histogram], bounds: Sequence[float],
                      queues: list[str]) -> HistogramMetricFamily:  # fmt: skip
    family = HistogramMetricFamily(name, doc, labels=["queue"])
    for queue in queues:
        h = data.get(queue, Histogram(buckets=[0] * len(bounds), count=0, total_s=0.0))
        buckets = [(floatToGoString(b), float(n)) for b, n in zip(bounds, h.buckets, strict=True)]
        buckets.append(("+Inf", float(h.count)))
        family.add_metric([queue], buckets, sum_value=h.total_s)
    return family


class GpulabCollector:
    """A Prometheus collector that reads the shared database (and Redis) each time it is collected."""

    def __init__(self, factory: SessionFactory, settings: Settings, clock: Callable[[], datetime] | None = None):
        self.factory = factory
        self.settings = settings
        self.clock = clock or (lambda: datetime.now(UTC))

    def describe(self) -> list[Metric]:
        return []  # nothing to check at registration, and no database read then

    def collect(self) -> Iterator[Metric]:
        now = self.clock()
        try:
            with self.factory() as session:
                snap: Snapshot | None = snapshot(session=session, settings=self.settings, now=now)
        except Exception:  # any database failure: say so in the scrape instead of failing it
            snap = None
        yield GaugeMetricFamily(
            "gpulab_database_up", "1 if the database answered this scrape", value=1 if snap is not None else 0
        )
        if snap is not None:
            yield from self._from_database(snap)
        if self.settings.broker_url:
            yield from self._from_broker()

    def _from_database(self, snap: Snapshot) -> Iterator[Metric]:
        queues = _queues(snap.duration, snap.wait, snap.queued, snap.running, {q: 0 for q, _ in snap.gradings})
        gradings = CounterMetricFamily("gpulab_gradings", "Settled gradings (regraded ones included) by queue and "
                                       "verdict", labels=["queue", "verdict"])  # fmt: skip
        for (queue, verdict), n in sorted(snap.gradings.items()):
            gradings.add_metric([queue, verdict], n)
        yield gradings
        yield _histogram_family("gpulab_grading_duration_seconds", "Time from start to verdict of settled gradings",
                                snap.duration, DURATION_BUCKETS_S, queues)  # fmt: skip
        yield _histogram_family("gpulab_queue_wait_seconds", "Time from submission to the start of its grading",
                                snap.wait, WAIT_BUCKETS_S, queues)  # fmt: skip
        depth = GaugeMetricFamily("gpulab_queue_depth", "Queued submissions (database)", labels=["queue"])
        oldest = GaugeMetricFamily("gpulab_oldest_queued_age_seconds", "Age of the oldest queued submission, 0 when "
                                   "none waits", labels=["queue"])  # fmt: skip
        running = GaugeMetricFamily("gpulab_running_submissions", "Submissions being graded", labels=["queue"])
        stranded = GaugeMetricFamily("gpulab_stranded_submissions", "Running submissions whose lease expired "
                                     "(heartbeat older than GPULAB_GRADING_LEASE_S)", labels=["queue"])  # fmt: skip
        for queue in queues:
            n, first = snap.queued.get(queue, (0, None))
            depth.add_metric([queue], n)
            age = (snap.now - as_utc(first)).total_seconds() if first else 0.0
            oldest.add_metric([queue], max(0.0, age))
            r, s = snap.running.get(queue, (0, 0))
            running.add_metric([queue], r)
            stranded.add_metric([queue], s)
        yield from (depth, oldest, running, stranded)

        states = [worker_state(b, settings=self.settings, now=snap.now) for b in snap.workers]
        live = GaugeMetricFamily("gpulab_workers_live", "Workers that beat within GPULAB_WORKER_STALE_S, per queue "
                                 "they serve", labels=["queue"])  # fmt: skip
        live_queues = sorted(set(ALL_QUEUES) | set(queues))
        for queue, n in sorted(live_per_queue([w for w in states if w.state == "live"], live_queues).items()):
            live.add_metric([queue], n)
        yield live
        labels = ["worker", "hostname"]
        up = GaugeMetricFamily("gpulab_worker_up", "1 live, 0 dead or stopped", labels=labels)
        busy = GaugeMetricFamily("gpulab_worker_busy", "Gradings in progress at the last beat", labels=labels)
        seen = GaugeMetricFamily("gpulab_worker_last_seen_timestamp_seconds", "Unix time of the last beat",
                                 labels=labels)  # fmt: skip
        swept = CounterMetricFamily("gpulab_sweeper_redispatches", "Submissions the sweeper in this worker sent "
                                    "again since it started", labels=labels)  # fmt: skip
        for w in states:
            key = [w.name, w.hostname]
            up.add_metric(key, 1 if w.state == "live" else 0)
            busy.add_metric(key, w.busy)
            seen.add_metric(key, w.last_seen_at.timestamp())
            swept.add_metric(key, w.redispatched)
        yield from (up, busy, seen, swept)
        yield from _warm_families([w for w in states if w.state == "live"])
        yield from _gpu_families([w for w in states if w.state == "live"])

    def _from_broker(self) -> Iterator[Metric]:
        try:
            depths: dict[str, int] | None = broker_depths(self.settings)
        except Exception:  # Redis down or slow: report it, never fail the scrape
            depths = None
        yield GaugeMetricFamily(
            "gpulab_broker_up", "1 if Redis answered this scrape", value=1 if depths is not None else 0
        )
        if depths is not None:
            family = GaugeMetricFamily("gpulab_broker_queue_depth", "Messages waiting in the Redis list of each "
                                       "queue", labels=["queue"])  # fmt: skip
            for queue, n in sorted(depths.items()):
                family.add_metric([queue], n)
            yield family


def _warm_families(live: list[WorkerState]) -> Iterator[Metric]:
    """What each live worker keeps warm, per kind: slots up, hits, misses by reason, memory, cold (1/0 by reason)."""
    labels = ["worker", "kind"]
    slots = GaugeMetricFamily("gpulab_warm_slots", "Warm templates (or ready container pairs) up, per kind",
                              labels=labels)  # fmt: skip
    hits = CounterMetricFamily("gpulab_warm_hits", "Jobs that found a warm template of their kind", labels=labels)
    misses = CounterMetricFamily("gpulab_warm_misses", "Jobs that found none, by reason", labels=[*labels, "reason"])
    memory = GaugeMetricFamily("gpulab_warm_memory_megabytes", "What the warm ones of a kind hold, as measured",
                               labels=labels)  # fmt: skip
    cold = GaugeMetricFamily("gpulab_warm_cold", "1 while a kind has nothing warm, labelled with why", labels=[
        *labels, "reason"])  # fmt: skip
    for w in live:
        for k in w.warm:
            key = [w.name, k.kind]
            slots.add_metric(key, k.warm)
            hits.add_metric(key, k.hits)
            for reason, n in sorted(k.misses.items()):
                misses.add_metric([*key, reason], n)
            memory.add_metric(key, k.memory_mb)
            if k.cold:
                cold.add_metric([*key, k.cold], 1)
    yield from (slots, hits, misses, memory, cold)


def _gpu_families(live: list[WorkerState]) -> Iterator[Metric]:
    """Each live GPU worker's slots and the GPUs of them that failed (by id, with why)."""
    total = GaugeMetricFamily("gpulab_gpus", "GPU (or MIG) slots a worker hands out", labels=["worker"])
    failed = GaugeMetricFamily("gpulab_gpus_failed", "1 for each GPU a worker found broken; it takes no job",
                               labels=["worker", "gpu", "reason"])  # fmt: skip
    for w in live:
        if w.gpus is not None:
            total.add_metric([w.name], len(w.gpus.ids))
            for gpu, why in sorted(w.gpus.failed.items()):
                failed.add_metric([w.name, gpu, why[:120]], 1)
    yield from (total, failed)


def render(factory: SessionFactory, settings: Settings) -> bytes:
    """Collect once and return the Prometheus text exposition."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(GpulabCollector(factory, settings))
    return generate_latest(registry)
