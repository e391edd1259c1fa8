"""Who is grading and what is stuck: worker liveness from ``WorkerBeat`` rows and stranded submissions.

Contract:
- A worker is ``live`` when ``stopped_at`` is NULL and ``last_seen_at`` is within ``settings.worker_stale_s``;
  ``dead`` when it never said it stopped but went quiet (a crash, a kill, a lost database); ``stopped`` when it
  exited cleanly. Rows are what every grading process writes about itself, so the answer is the same in every
  API process.
- ``required_queues``: the queues that must have a live worker for the platform to be ready: ``cpu`` always
  (the default: a queue name the dispatcher does not know goes there, and so do instructor checks of CPU
  exercises), ``gpu`` only while a published exercise's current version is graded there, so a deployment
  without GPU nodes and without GPU exercises is ready; and the example-run lane of each (``examples-cpu``,
  ``examples-gpu``), which ``gpulab worker`` consumes in a companion process or in its own pool.
- ``overview`` gathers what the admin dashboard and ``/api/admin/liveness`` show; each worker carries what it kept
  warm at its last beat (``WarmKind``: per kind, slots up, hits, misses by reason, memory, why it is cold), and
  a GPU worker's slots (``GpuSlots``: its ids, how many a job takes, the GPUs that failed and why).
- A submission is ``stranded`` when it is ``running`` with a heartbeat (or, before its first one, a start)
  older than ``settings.grading_lease_s``, or ``queued`` for longer than ``STRANDED_QUEUED_S``.
- Functions take the session keyword-only, only read, and take ``now`` so a page shows one consistent instant.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import Field
from sqlalchemy import ColumnElement, func, or_, select
from sqlalchemy.orm import Session

from app.domain import leases
from app.domain.models import Exercise, ExerciseVersion, Submission, SubmissionStatus, WorkerBeat
from app.domain.platform.clock import UtcDatetime, as_utc
from app.domain.platform.queues import ALL_QUEUES, DEFAULT_QUEUE, grading_queue, lane_for
from app.settings import Settings

STRANDED_QUEUED_S = 60.0
WORKERS_SHOWN = 50
STRANDED_SHOWN = 50


@dataclass(frozen=True)
class WarmKind:
    """One kind of warm template (or container pair shape) of a worker at its last beat."""

    kind: str  # e.g. "torch, 2 virtual CUDA devices" or "judge-tensorflow"
    warm: int  # templates (or ready pairs) up
    size: int  # how many it keeps of each kind when memory allows
    hits: int  # jobs that found one warm
    misses: dict[str, int]  # jobs that found none, by reason (first use, budget, failed start, idle, evicted, ...)
    memory_mb: int  # what the warm ones hold, as measured
    cold: str  # why the kind has none up now ("" when it has)

    @property
    def hit_pct(self) -> float | None:
        """Return the share of jobs that found a warm one, in per cent (None before any job)."""
        jobs = self.hits + sum(self.misses.values())
        return 100 * self.hits / jobs if jobs else None

    @classmethod
    def of(cls, entry: dict[str, Any]) -> WarmKind | None:
        """Read one entry of a heartbeat's ``warm`` (written by another process: checked, never trusted)."""
        try:
            misses = {str(k): int(v) for k, v in dict(entry.get("misses") or {}).items()}
            return cls(
                kind=str(entry["kind"]), warm=int(entry["warm"]), size=int(entry["size"]), hits=int(entry["hits"]),
                misses=misses, memory_mb=int(entry.get("memory_mb", 0)), cold=str(entry.get("cold", "")),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


@dataclass(frozen=True)
class GpuSlots:
    """A GPU worker's slots at its last beat: its GPU (or MIG) ids, how many a job takes, which failed and why."""

    ids: list[str]
    per_job: int
    failed: dict[str, str]

    @property
    def usable(self) -> int:
        return len(self.ids) - len(self.failed)

    @property
    def takes_jobs(self) -> bool:
        """Say whether enough GPUs are left for one job (a host that has not stops taking GPU jobs)."""
        return self.usable >= self.per_job

    @classmethod
    def of(cls, entry: object) -> GpuSlots | None:
        """Read a heartbeat's ``gpus`` (written by another process: checked, never trusted)."""
        if not isinstance(entry, dict):
            return None
        try:
            return cls(
                ids=[str(i) for i in entry["ids"]], per_job=int(entry["per_job"]),
                failed={str(k): str(v)[:300] for k, v in dict(entry.get("failed") or {}).items()},
            )  # fmt: skip
        except (KeyError, TypeError, ValueError):
            return None


@dataclass(frozen=True)
class WorkerState:
    name: str
    queues: list[str]
    hostname: str
    pid: int
    sandbox: str
    busy: int
    redispatched: int
    started_at: UtcDatetime
    last_seen_at: UtcDatetime
    stopped_at: UtcDatetime | None
    state: Literal["live", "dead", "stopped"]
    seen_ago_s: float
    warm: list[WarmKind] = field(default_factory=list)  # what it kept warm at its last beat, by kind
    gpus: GpuSlots | None = None  # a GPU worker's slots at its last beat

    @property
    def seen_ago(self) -> str:
        return duration_text(self.seen_ago_s)


@dataclass(frozen=True)
class StrandedSubmission:
    id: str
    slug: str
    queue: str
    status: Literal["queued", "running"]
    attempts: int
    created_at: UtcDatetime
    since: Annotated[UtcDatetime, Field(description="last lease renewal (running) or submission time (queued)")]
    age_s: float
    why: str

    @property
    def age(self) -> str:
        return duration_text(self.age_s)


@dataclass(frozen=True)
class Overview:
    """What the admin dashboard shows: recent workers, live ones per required queue, stranded work."""

    now: datetime
    workers: list[WorkerState]
    required: list[str]
    live: dict[str, int]
    stranded: list[StrandedSubmission]
    stranded_total: int
    worker_stale_s: float
    grading_lease_s: float
    stranded_queued_s: float


def duration_text(seconds: float) -> str:
    """Say a duration the way a person reads it: ``45 s``, ``3 min``, ``2 h``, ``4 d``."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size:
            return f"{int(seconds // size)} {unit}"
    return f"{int(seconds)} s"


def worker_state(beat: WorkerBeat, *, settings: Settings, now: datetime) -> WorkerState:
    """Describe one heartbeat row as live, dead or stopped."""
    seen = as_utc(beat.last_seen_at)
    ago = max(0.0, (now - seen).total_seconds())
    state: Literal["live", "dead", "stopped"]
    if beat.stopped_at is not None:
        state = "stopped"
    elif ago <= settings.worker_stale_s:
        state = "live"
    else:
        state = "dead"
    return WorkerState(
        name=beat.name, queues=list(beat.queues or []), hostname=beat.hostname, pid=beat.pid, sandbox=beat.sandbox,
        busy=beat.busy, redispatched=beat.redispatched, started_at=as_utc(beat.started_at), last_seen_at=seen,
        stopped_at=as_utc(beat.stopped_at) if beat.stopped_at else None, state=state, seen_ago_s=ago,
        warm=[kind for entry in beat.warm or [] if isinstance(entry, dict) and (kind := WarmKind.of(entry))],
        gpus=GpuSlots.of(beat.gpus),
    )  # fmt: skip


def workers(*, session: Session, settings: Settings, now: datetime, limit: int = WORKERS_SHOWN) -> list[WorkerState]:
    """Return the most recently seen workers, newest first."""
    rows = session.scalars(select(WorkerBeat).order_by(WorkerBeat.last_seen_at.desc()).limit(limit))
    return [worker_state(b, settings=settings, now=now) for b in rows]


def live_workers(*, session: Session, settings: Settings, now: datetime) -> list[WorkerState]:
    """Return every live worker."""
    cutoff = now - timedelta(seconds=settings.worker_stale_s)
    stmt = select(WorkerBeat).where(WorkerBeat.stopped_at.is_(None), WorkerBeat.last_seen_at >= cutoff)
    return [worker_state(b, settings=settings, now=now) for b in session.scalars(stmt)]


def live_per_queue(live: list[WorkerState], queues: list[str] | tuple[str, ...] = ALL_QUEUES) -> dict[str, int]:
    """Count live workers serving each of ``queues`` (a worker on several queues counts for each)."""
    counts = {q: 0 for q in queues}
    for worker in live:
        for queue in set(worker.queues):
            counts[queue] = counts.get(queue, 0) + 1
    return counts


def required_queues(*, session: Session) -> list[str]:
    """Return the queues that need a live worker: ``cpu``, those of published exercises, and their example lanes."""
    stmt = (
        select(ExerciseVersion.queue)
        .join(Exercise, Exercise.current_version_id == ExerciseVersion.id)
        .where(Exercise.is_published.is_(True))
        .distinct()
    )
    needed = {grading_queue(q) for q in session.scalars(stmt)} | {DEFAULT_QUEUE}
    return sorted(needed | {lane_for(q) for q in needed})


def _stranded_filter(*, settings: Settings, now: datetime) -> ColumnElement[bool]:
    queued_cutoff = now - timedelta(seconds=STRANDED_QUEUED_S)
    return or_(
        leases.expired(Submission, lease_s=settings.grading_lease_s, now=now),
        (Submission.status == SubmissionStatus.queued) & (Submission.created_at < queued_cutoff),
    )


def stranded(
    *, session: Session, settings: Settings, now: datetime, limit: int = STRANDED_SHOWN
) -> tuple[list[StrandedSubmission], int]:
    """Return the longest-stuck stranded submissions (at most ``limit``) and how many there are in all."""
    where = _stranded_filter(settings=settings, now=now)
    total = session.scalar(select(func.count()).select_from(Submission).where(where)) or 0
    if not total:
        return [], 0
    stmt = (
        select(Submission.id, Exercise.slug, ExerciseVersion.queue, Submission.status, Submission.attempts,
               Submission.created_at, Submission.started_at, Submission.heartbeat_at)
        .join(ExerciseVersion, Submission.exercise_version_id == ExerciseVersion.id)
        .join(Exercise, ExerciseVersion.exercise_id == Exercise.id)
        .where(where)
        .order_by(Submission.created_at)
        .limit(limit)
    )  # fmt: skip
    found = []
    for sid, slug, queue, status, attempts, created, started, beat in session.execute(stmt):
        created = as_utc(created)
        state: Literal["queued", "running"]
        if status == SubmissionStatus.running:
            state = "running"
            since = as_utc(beat or started or created)
            why = "running, but its worker stopped renewing the lease" if beat else "running, never renewed its lease"
        else:
            state = "queued"
            since = created
            why = "queued, no worker picked it up"
        found.append(StrandedSubmission(
            id=sid, slug=slug, queue=queue, status=state, attempts=attempts, created_at=created, since=since,
            age_s=max(0.0, (now - since).total_seconds()), why=why,
        ))  # fmt: skip
    return found, int(total)


def overview(*, session: Session, settings: Settings, now: datetime) -> Overview:
    """Return the workers, queue coverage and stranded submissions as of ``now``."""
    recent = workers(session=session, settings=settings, now=now)
    live = live_workers(session=session, settings=settings, now=now)
    needed = required_queues(session=session)
    found, total = stranded(session=session, settings=settings, now=now)
    return Overview(
        now=now, workers=recent, required=needed, live=live_per_queue(live, needed), stranded=found,
        stranded_total=total, worker_stale_s=settings.worker_stale_s, grading_lease_s=settings.grading_lease_s,
        stranded_queued_s=STRANDED_QUEUED_S,
    )  # fmt: skip
