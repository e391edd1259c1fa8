"""``/healthz``, ``/readyz`` and ``/metrics`` on real SQLite and PostgreSQL databases and a real Redis (db 11)."""

from __future__ import annotations

import socket
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from sqlalchemy.orm import Session, sessionmaker

from app.domain.exercises.bank import upsert_exercise
from app.domain.models import Exercise, GradingRecord, Submission, SubmissionStatus, WorkerBeat
from app.domain.platform.db import Base, engine_for
from app.jobs.dispatch import reset_dispatcher
from app.main import create_app
from app.settings import get_settings
from app.web.routes.health import PROBE_DEADLINE_S
from tests.conftest import tiny_files
from tests.support import configure, free_port, fresh_postgres_db, require_service
from worker.bank.spec import ExerciseSpec
from worker.core.outcome import Verdict

if TYPE_CHECKING:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

HEALTH_REDIS_URL = "redis://127.0.0.1:6379/11"
PG_NAME = "gpulab_test_health"
LOOPBACK = ("127.0.0.1", 50123)
_CLOSED = free_port()  # nothing listens here
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def client_from(application: FastAPI, *, client: tuple[str, int] = LOOPBACK) -> TestClient:
    """Return a client whose requests come from ``client`` (loopback unless told otherwise)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient` is deprecated")
        from fastapi.testclient import TestClient

    return TestClient(application, client=client)


def now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Deployment:
    """An app on a database of its own, and sessions on that database that write what workers would."""

    app: FastAPI
    db: sessionmaker[Session]

    def exercise(self, queue: str = "cpu", *, published: bool = True) -> Exercise:
        tag = uuid.uuid4().hex[:12]
        spec = ExerciseSpec.from_files(f"health-{tag}", tiny_files(prompt_md="# Add\n", queue=queue, tag=tag))
        with self.db() as session:
            exercise, _ = upsert_exercise(session=session, spec=spec)
            exercise.is_published = published
            session.commit()
            return exercise

    def beat(self, name: str, queues: list[str], *, seen_ago_s: float = 0.0, stopped: bool = False,
             redispatched: int = 0, busy: int = 0, warm: list[dict[str, Any]] | None = None) -> None:  # fmt: skip
        seen = now() - timedelta(seconds=seen_ago_s)
        with self.db() as session:
            session.merge(WorkerBeat(name=name, queues=queues, hostname="node-1", pid=4242, sandbox="local", busy=busy,
                                     redispatched=redispatched, started_at=seen - timedelta(seconds=60),
                                     last_seen_at=seen, stopped_at=seen if stopped else None, warm=warm))  # fmt: skip
            session.commit()

    def submission(self, exercise: Exercise, status: SubmissionStatus, **fields: Any) -> str:
        with self.db() as session:
            row = Submission(exercise_version_id=exercise.current_version_id, code="x", status=status, **fields)
            session.add(row)
            session.commit()
            return row.id


def _reset_tables(url: str) -> None:
    engine = engine_for(url)
    Base.metadata.create_all(engine)
    if engine.dialect.name == "postgresql":
        names = ", ".join(t.name for t in Base.metadata.sorted_tables)
        with engine.begin() as conn:
            conn.execute(text(f"TRUNCATE {names} CASCADE"))


@pytest.fixture(scope="module")
def pg_url() -> str:
    require_service("PostgreSQL", "127.0.0.1", 5432)
    return fresh_postgres_db(PG_NAME)


@pytest.fixture
def deploy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Callable[..., Deployment]]:
    """Return ``deploy(database_url, reachable=True, **settings)``: an app (no recovery at start) on that database,
    emptied first unless it is not ``reachable``."""

    def make(database_url: str, *, reachable: bool = True, **env: str) -> Deployment:
        configure(monkeypatch, mode="dev", data_dir=str(tmp_path / "data"), database_url=database_url, **env)
        settings = get_settings()
        if reachable:
            _reset_tables(settings.database_url)
        application = create_app(settings)
        application.state.recover_on_start = False
        db = sessionmaker(bind=engine_for(settings.database_url), expire_on_commit=False)
        return Deployment(app=application, db=db)

    yield make
    reset_dispatcher()
    get_settings.cache_clear()
    engine_for.cache_clear()


def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'health.db'}"


def closed_pg_url() -> str:
    return f"postgresql://postgres@127.0.0.1:{_CLOSED}/nowhere"


def parse(body: str) -> Samples:
    """Return every sample of a Prometheus text body, keyed by name and labels."""
    return {
        (s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(body) for s in f.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def scrape(application: FastAPI, **headers: str) -> Samples:
    response = client_from(application).get("/metrics", headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return parse(response.text)


# --- /healthz and /readyz, embedded ------------------------------------------------------------------------


def test_healthz_answers_without_the_database_or_a_cookie(deploy: Callable[..., Deployment]) -> None:
    d = deploy(closed_pg_url(), reachable=False)
    response = client_from(d.app).get("/healthz")
    assert response.status_code == 200 and response.json() == {"status": "alive"}
    assert "set-cookie" not in response.headers and response.headers["cache-control"] == "no-store"


def test_readyz_embedded_is_ready_once_the_dispatcher_runs(deploy: Callable[..., Deployment], tmp_path: Path) -> None:
    d = deploy(sqlite_url(tmp_path))
    before = client_from(d.app).get("/readyz")
    assert before.status_code == 503 and before.json()["failed"] == ["dispatcher"]
    d.app.state.recover_on_start = True  # what `gpulab serve` does: the lifespan makes the in-process pool
    with client_from(d.app) as client:
        response = client.get("/readyz")
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["ready"] is True and body["mode"] == "embedded" and body["failed"] == []
        assert [c["name"] for c in body["checks"]] == ["database", "dispatcher"]
        assert "set-cookie" not in response.headers


def test_readyz_embedded_fails_when_the_database_is_unreachable(deploy: Callable[..., Deployment]) -> None:
    d = deploy(closed_pg_url(), reachable=False)
    response = client_from(d.app).get("/readyz")
    assert response.status_code == 503
    body = response.json()
    assert "database" in body["failed"] and body["ready"] is False
    database = next(c for c in body["checks"] if c["name"] == "database")
    assert database["ok"] is False and "unreachable" in database["detail"]


def test_readyz_answers_503_in_time_when_the_database_hangs(deploy: Callable[..., Deployment]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts connections, never says a word
        d = deploy(f"postgresql://postgres@127.0.0.1:{silent.getsockname()[1]}/hung", reachable=False)
        started = time.monotonic()
        status = client_from(d.app).get("/readyz")
        assert status.status_code == 503 and status.json()["failed"] == ["database", "dispatcher"]
        # The detail below proves the deadline fired; this bound only catches a probe that waited for the hang
        # itself (it never ends), with room for a loaded machine: no test here depends on the machine's speed.
        assert time.monotonic() - started < PROBE_DEADLINE_S * 10
        database = next(c for c in status.json()["checks"] if c["name"] == "database")
        assert database["detail"] == f"no answer within {PROBE_DEADLINE_S:g} s"
        assert client_from(d.app).get("/healthz").status_code == 200  # alive all the same


# --- /readyz, Celery mode on PostgreSQL + Redis ------------------------------------------------------------


@pytest.fixture
def celery(deploy: Callable[..., Deployment], pg_url: str) -> Deployment:
    require_service("Redis", "127.0.0.1", 6379)
    return deploy(pg_url, broker_url=HEALTH_REDIS_URL)


def ready(d: Deployment) -> tuple[int, dict[str, Any]]:
    response = client_from(d.app).get("/readyz")
    assert response.headers["cache-control"] == "no-store"
    return response.status_code, response.json()


@pytest.mark.postgres
@pytest.mark.redis
def test_readyz_celery_needs_a_live_worker_on_every_required_queue(celery: Deployment) -> None:
    celery.exercise("cpu")
    status, body = ready(celery)
    assert status == 503 and body["mode"] == "celery" and body["failed"] == ["queue:cpu", "queue:examples-cpu"]
    check = next(c for c in body["checks"] if c["name"] == "queue:cpu")
    assert "no live worker on queue cpu" in check["detail"]

    celery.beat("celery@cpu-1", ["cpu"])
    status, body = ready(celery)
    assert status == 503 and body["failed"] == ["queue:examples-cpu"]  # example runs would wait for good
    celery.beat("celery@cpu-1-examples", ["examples-cpu"])  # the worker's companion on the fast lane
    status, body = ready(celery)
    assert status == 200 and body["failed"] == [], body
    names = [c["name"] for c in body["checks"]]
    assert names == ["database", "broker", "queue:cpu", "queue:examples-cpu"]  # no GPU exercise: no gpu

    celery.exercise("gpu", published=False)  # a hidden GPU exercise needs no GPU node yet
    assert ready(celery)[0] == 200
    celery.exercise("gpu")
    status, body = ready(celery)
    assert status == 503 and body["failed"] == ["queue:examples-gpu", "queue:gpu"]
    celery.beat("celery@gpu-1", ["gpu", "examples-gpu"])  # --examples-concurrency 0: one pool takes both
    assert ready(celery)[0] == 200


@pytest.mark.postgres
@pytest.mark.redis
def test_readyz_celery_refuses_stale_and_stopped_workers(celery: Deployment) -> None:
    stale_s = get_settings().worker_stale_s
    queues = ["cpu", "examples-cpu"]
    celery.beat("celery@cpu-1", queues, seen_ago_s=stale_s + 5)
    status, body = ready(celery)
    assert status == 503 and body["failed"] == ["queue:cpu", "queue:examples-cpu"]
    celery.beat("celery@cpu-1", queues, stopped=True)  # said goodbye just now: not serving
    assert ready(celery)[1]["failed"] == ["queue:cpu", "queue:examples-cpu"]
    celery.beat("celery@cpu-1", queues, seen_ago_s=stale_s - 5)
    assert ready(celery)[0] == 200


@pytest.mark.postgres
@pytest.mark.redis
def test_readyz_celery_fails_when_redis_is_unreachable(deploy: Callable[..., Deployment], pg_url: str) -> None:
    d = deploy(pg_url, broker_url=f"redis://127.0.0.1:{_CLOSED}/0")
    d.beat("celery@cpu-1", ["cpu", "examples-cpu"])
    status, body = ready(d)
    assert status == 503 and body["failed"] == ["broker"]
    broker = next(c for c in body["checks"] if c["name"] == "broker")
    assert broker["ok"] is False and "unreachable" in broker["detail"]


@pytest.mark.redis
def test_readyz_celery_fails_when_the_database_is_unreachable(deploy: Callable[..., Deployment]) -> None:
    require_service("Redis", "127.0.0.1", 6379)
    d = deploy(closed_pg_url(), reachable=False, broker_url=HEALTH_REDIS_URL)
    status, body = ready(d)
    assert status == 503 and body["failed"] == ["database", "queue:*"]
    assert next(c for c in body["checks"] if c["name"] == "broker")["ok"] is True


# --- /metrics ----------------------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def any_db(request: pytest.FixtureRequest, deploy: Callable[..., Deployment], tmp_path: Path) -> Deployment:
    if request.param == "sqlite":
        return deploy(sqlite_url(tmp_path))
    return deploy(request.getfixturevalue("pg_url"))


def test_metrics_are_read_from_the_database(any_db: Deployment) -> None:
    d = any_db
    cpu, gpu = d.exercise("cpu"), d.exercise("gpu")
    t0 = now() - timedelta(minutes=10)
    lease_s = get_settings().grading_lease_s

    def graded(ex: Exercise, verdict: Verdict, wait_s: float, run_s: float) -> str:
        start = t0 + timedelta(seconds=wait_s)
        return d.submission(ex, SubmissionStatus.graded, verdict=verdict, created_at=t0, started_at=start,
                            finished_at=start + timedelta(seconds=run_s))  # fmt: skip

    graded(cpu, Verdict.passed, 0.3, 1.5)
    graded(cpu, Verdict.passed, 4.0, 7.0)
    regraded = graded(cpu, Verdict.failed, 40.0, 25.0)
    graded(gpu, Verdict.timeout, 1.0, 100.0)
    with d.db() as session:  # an earlier result, archived by a regrade, still counts as a grading
        version = session.get(Submission, regraded).exercise_version_id  # type: ignore[union-attr]
        session.add(GradingRecord(submission_id=regraded, exercise_version_id=version, status="graded",
                                  verdict="crashed", max_score=5.0))  # fmt: skip
        session.commit()
    d.submission(cpu, SubmissionStatus.queued, created_at=now() - timedelta(seconds=90))
    d.submission(cpu, SubmissionStatus.queued, created_at=now() - timedelta(seconds=5))
    d.submission(cpu, SubmissionStatus.running, created_at=t0, started_at=now(), heartbeat_at=now())
    d.submission(gpu, SubmissionStatus.running, created_at=t0, started_at=t0,
                 heartbeat_at=now() - timedelta(seconds=lease_s + 10))  # fmt: skip
    warm = [{"kind": "torch", "warm": 1, "size": 2, "hits": 7, "misses": {"first use": 1, "evicted": 2},
             "memory_mb": 301, "cold": ""},
            {"kind": "judge-tensorflow", "warm": 0, "size": 2, "hits": 0, "misses": {"budget": 3}, "memory_mb": 0,
             "cold": "budget"}]  # fmt: skip
    d.beat("celery@a", ["cpu", "gpu"], redispatched=3, busy=1, warm=warm)
    d.beat("celery@b", ["cpu"], seen_ago_s=get_settings().worker_stale_s + 60, redispatched=2, warm=warm)

    s = scrape(d.app)
    assert value(s, "gpulab_database_up") == 1
    assert value(s, "gpulab_gradings_total", queue="cpu", verdict="passed") == 2
    assert value(s, "gpulab_gradings_total", queue="cpu", verdict="failed") == 1
    assert value(s, "gpulab_gradings_total", queue="cpu", verdict="crashed") == 1
    assert value(s, "gpulab_gradings_total", queue="gpu", verdict="timeout") == 1

    duration = "gpulab_grading_duration_seconds"
    assert value(s, f"{duration}_count", queue="cpu") == 3
    assert value(s, f"{duration}_sum", queue="cpu") == pytest.approx(33.5, abs=0.01)
    assert value(s, f"{duration}_bucket", queue="cpu", le="2.0") == 1
    assert value(s, f"{duration}_bucket", queue="cpu", le="10.0") == 2
    assert value(s, f"{duration}_bucket", queue="cpu", le="20.0") == 2
    assert value(s, f"{duration}_bucket", queue="cpu", le="30.0") == 3
    assert value(s, f"{duration}_bucket", queue="cpu", le="+Inf") == 3
    assert value(s, f"{duration}_bucket", queue="gpu", le="60.0") == 0
    assert value(s, f"{duration}_bucket", queue="gpu", le="120.0") == 1

    wait = "gpulab_queue_wait_seconds"  # settled and running ones have started
    assert value(s, f"{wait}_count", queue="cpu") == 4
    assert value(s, f"{wait}_bucket", queue="cpu", le="0.5") == 1
    assert value(s, f"{wait}_bucket", queue="cpu", le="5.0") == 2
    assert value(s, f"{wait}_bucket", queue="cpu", le="60.0") == 3
    assert value(s, f"{wait}_count", queue="gpu") == 2

    assert value(s, "gpulab_queue_depth", queue="cpu") == 2
    assert value(s, "gpulab_queue_depth", queue="gpu") == 0
    assert 89 <= value(s, "gpulab_oldest_queued_age_seconds", queue="cpu") < 120
    assert value(s, "gpulab_oldest_queued_age_seconds", queue="gpu") == 0
    assert value(s, "gpulab_running_submissions", queue="cpu") == 1
    assert value(s, "gpulab_stranded_submissions", queue="cpu") == 0
    assert value(s, "gpulab_running_submissions", queue="gpu") == 1
    assert value(s, "gpulab_stranded_submissions", queue="gpu") == 1

    assert value(s, "gpulab_workers_live", queue="cpu") == 1 and value(s, "gpulab_workers_live", queue="gpu") == 1
    assert value(s, "gpulab_workers_live", queue="examples-cpu") == 0
    assert value(s, "gpulab_worker_up", worker="celery@a", hostname="node-1") == 1
    assert value(s, "gpulab_worker_up", worker="celery@b", hostname="node-1") == 0
    assert value(s, "gpulab_worker_busy", worker="celery@a", hostname="node-1") == 1
    assert value(s, "gpulab_sweeper_redispatches_total", worker="celery@a", hostname="node-1") == 3
    assert value(s, "gpulab_sweeper_redispatches_total", worker="celery@b", hostname="node-1") == 2
    seen = value(s, "gpulab_worker_last_seen_timestamp_seconds", worker="celery@a", hostname="node-1")
    assert abs(seen - now().timestamp()) < 60
    assert not any(name.startswith("gpulab_broker") for name, _ in s)  # embedded: no broker

    # What the live worker keeps warm (the dead one's last beat says nothing about now).
    assert value(s, "gpulab_warm_slots", worker="celery@a", kind="torch") == 1
    assert value(s, "gpulab_warm_hits_total", worker="celery@a", kind="torch") == 7
    assert value(s, "gpulab_warm_misses_total", worker="celery@a", kind="torch", reason="evicted") == 2
    assert value(s, "gpulab_warm_memory_megabytes", worker="celery@a", kind="torch") == 301
    assert value(s, "gpulab_warm_cold", worker="celery@a", kind="judge-tensorflow", reason="budget") == 1
    assert not any(dict(labels).get("worker") == "celery@b" for name, labels in s if name.startswith("gpulab_warm"))


def test_metrics_say_when_the_database_is_down(deploy: Callable[..., Deployment]) -> None:
    s = scrape(deploy(closed_pg_url(), reachable=False).app)
    assert value(s, "gpulab_database_up") == 0
    assert not any(name.startswith("gpulab_queue_depth") for name, _ in s)


@pytest.mark.postgres
@pytest.mark.redis
def test_metrics_read_the_broker_queues_in_celery_mode(celery: Deployment) -> None:
    import redis

    client = redis.Redis.from_url(HEALTH_REDIS_URL)
    client.flushdb()
    try:
        client.rpush("cpu", "m1", "m2", "m3")
        client.rpush("gpu", "m4")
        client.rpush("examples-cpu", "m5", "m6")
        s = scrape(celery.app)
    finally:
        client.flushdb()
        client.close()
    assert value(s, "gpulab_broker_up") == 1
    assert value(s, "gpulab_broker_queue_depth", queue="cpu") == 3
    assert value(s, "gpulab_broker_queue_depth", queue="gpu") == 1
    assert value(s, "gpulab_broker_queue_depth", queue="examples-cpu") == 2
    assert value(s, "gpulab_broker_queue_depth", queue="examples-gpu") == 0
    assert value(s, "gpulab_queue_depth", queue="cpu") == 0  # the database says what was accepted


@pytest.mark.postgres
def test_metrics_say_when_the_broker_is_down(deploy: Callable[..., Deployment], pg_url: str) -> None:
    s = scrape(deploy(pg_url, broker_url=f"redis://127.0.0.1:{_CLOSED}/0").app)
    assert value(s, "gpulab_broker_up") == 0 and value(s, "gpulab_database_up") == 1
    assert not any(name == "gpulab_broker_queue_depth" for name, _ in s)


def test_metrics_answer_loopback_only_without_a_token(deploy: Callable[..., Deployment], tmp_path: Path) -> None:
    d = deploy(sqlite_url(tmp_path))
    assert client_from(d.app).get("/metrics").status_code == 200
    assert client_from(d.app, client=("::1", 5)).get("/metrics").status_code == 200
    remote = client_from(d.app, client=("203.0.113.9", 5)).get("/metrics")
    assert remote.status_code == 403 and "GPULAB_METRICS_TOKEN" in remote.json()["detail"]
    assert client_from(d.app, client=("testclient", 5)).get("/metrics").status_code == 403
    for header in ("X-Forwarded-For", "Forwarded", "X-Real-IP"):  # a local reverse proxy relaying the world
        proxied = client_from(d.app).get("/metrics", headers={header: "203.0.113.9"})
        assert proxied.status_code == 403, header
    assert "set-cookie" not in client_from(d.app).get("/metrics").headers


def test_metrics_need_the_bearer_token_when_one_is_set(deploy: Callable[..., Deployment], tmp_path: Path) -> None:
    token = "t0ken-" + uuid.uuid4().hex
    d = deploy(sqlite_url(tmp_path), metrics_token=token)
    remote = client_from(d.app, client=("203.0.113.9", 5))
    assert remote.get("/metrics").status_code == 401
    assert remote.get("/metrics", headers={"Authorization": f"Bearer {token}x"}).status_code == 401
    assert remote.get("/metrics", headers={"Authorization": f"Basic {token}"}).status_code == 401
    assert client_from(d.app).get("/metrics").status_code == 401  # loopback is no exception once a token is set
    ok = remote.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert ok.status_code == 200 and "gpulab_database_up 1.0" in ok.text


# --- OpenAPI -----------------------------------------------------------------------------------------------


def test_openapi_declares_the_health_routes_and_their_errors(deploy: Callable[..., Deployment], tmp_path: Path) -> None:
    spec = client_from(deploy(sqlite_url(tmp_path)).app).get("/openapi.json").json()
    healthz = spec["paths"]["/healthz"]["get"]["responses"]
    assert set(healthz) == {"200"}
    assert healthz["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/HealthOut"}
    readyz = spec["paths"]["/readyz"]["get"]["responses"]
    assert set(readyz) == {"200", "503"}
    for code in ("200", "503"):
        assert readyz[code]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ReadyOut"}
    assert set(spec["components"]["schemas"]["ReadyOut"]["properties"]) == {"ready", "mode", "checks", "failed"}
    scraped = spec["paths"]["/metrics"]["get"]["responses"]
    assert set(scraped) == {"200", "401", "403"}
    assert "text/plain; version=0.0.4; charset=utf-8" in scraped["200"]["content"]
    for code in ("401", "403"):
        problem = scraped[code]["content"]["application/problem+json"]["schema"]
        assert problem == {"$ref": "#/components/schemas/Problem"}
    assert all("security" not in spec["paths"][p]["get"] for p in ("/healthz", "/readyz", "/metrics"))
