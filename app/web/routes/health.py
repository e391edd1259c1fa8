"""``/healthz``, ``/readyz`` and ``/metrics``: what load balancers, orchestrators and Prometheus ask.

Contract:
- Outside ``/api``, no login, no session and no CSRF token: nothing here reads or writes the session, so no
  cookie is ever set; answers carry ``Cache-Control: no-store``, and errors are problem details like the API's
  (``app.web.errors.JSON_PATHS`` lists these paths). A 503 of ``/readyz`` is its ``ReadyOut``, not a problem:
  probes read ``failed``.
- ``/healthz``: the process serves requests; 200 ``{"status": "alive"}`` without touching the database.
- ``/readyz``: 200 when every check passes, else 503; the body lists each check (``database``, then in Celery
  mode ``broker`` and one ``queue:<name>`` per queue of ``app.domain.operations.liveness.required_queues``, in the
  embedded
  default ``dispatcher``) and names the failed ones. A queue passes when at least one live ``WorkerBeat``
  serves it. Every probe runs in a small pool of its own under ``PROBE_DEADLINE_S``: a hung database or
  broker makes the answer 503, never a hung probe, and never takes a request thread.
- ``/metrics``: the Prometheus text of ``app.domain.operations.metrics``, guarded by
``app.domain.operations.metrics.check_access``
  (401 without the right bearer token when ``GPULAB_METRICS_TOKEN`` is set, else 403 unless loopback and not proxied).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Literal, TypeVar

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from sqlalchemy import text
from starlette.concurrency import run_in_threadpool

from app.domain.operations import liveness, metrics
from app.settings import Settings
from app.web.deps import SessionFactory, SessionFactoryDep, SettingsDep
from app.web.errors import problem_responses

router = APIRouter(tags=["health"])

PROBE_DEADLINE_S = 3.0
BROKER_TIMEOUT_S = 1.0
NO_STORE = {"Cache-Control": "no-store"}
# Own threads: a probe stuck on a dead database waits here, not in the threadpool that serves requests.
_probes = ThreadPoolExecutor(max_workers=4, thread_name_prefix="gpulab-readyz")
T = TypeVar("T")


class HealthOut(BaseModel):
    status: Literal["alive"]


class CheckOut(BaseModel):
    name: str
    ok: bool
    detail: str


class ReadyOut(BaseModel):
    ready: bool
    mode: Literal["embedded", "celery"]
    checks: list[CheckOut]
    failed: list[str]


@router.get("/healthz", response_model=HealthOut, responses={200: {"description": "The process is serving requests"}})
async def healthz() -> JSONResponse:
    """Say that this process is alive (no database access)."""
    return JSONResponse(HealthOut(status="alive").model_dump(), headers=NO_STORE)


async def _probe(fn: Callable[[], T]) -> T:
    """Run ``fn`` in the probe pool; raise ``TimeoutError`` after ``PROBE_DEADLINE_S``."""
    future = _probes.submit(fn)
    return await asyncio.wait_for(asyncio.wrap_future(future), timeout=PROBE_DEADLINE_S)


def _database_checks(factory: SessionFactory, settings: Settings) -> tuple[str, list[CheckOut]]:
    """Ping the database, then (Celery mode) check each required queue for a live worker."""
    started = time.monotonic()
    with factory() as session:
        session.execute(text("SELECT 1"))
        detail = f"answered in {(time.monotonic() - started) * 1000:.0f} ms"
        if not settings.broker_url:
            return detail, []
        now = datetime.now(UTC)
        live = liveness.live_workers(session=session, settings=settings, now=now)
        needed = liveness.required_queues(session=session)
    counts = liveness.live_per_queue(live, needed)
    queues = []
    for queue in needed:
        n = counts.get(queue, 0)
        ok_text = f"{n} live worker{'s' if n != 1 else ''}"
        fail_text = f"no live worker on queue {queue} in the last {settings.worker_stale_s:g} s"
        queues.append(CheckOut(name=f"queue:{queue}", ok=n > 0, detail=ok_text if n else fail_text))
    return detail, queues


def _ping_broker(settings: Settings) -> tuple[str, list[CheckOut]]:
    import redis

    client = redis.Redis.from_url(
        settings.broker_url, socket_timeout=BROKER_TIMEOUT_S, socket_connect_timeout=BROKER_TIMEOUT_S
    )
    started = time.monotonic()
    try:
        client.ping()
    finally:
        client.close()
    return f"answered in {(time.monotonic() - started) * 1000:.0f} ms", []


def _failure(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return f"no answer within {PROBE_DEADLINE_S:g} s"
    return f"unreachable ({type(exc).__name__})"  # the message may carry a password in a URL: not shown


async def _checked(name: str, fn: Callable[[], tuple[str, list[CheckOut]]]) -> tuple[CheckOut, list[CheckOut] | None]:
    """Run one probe; return its check and the checks it made on the way (None when it failed)."""
    try:
        detail, more = await _probe(fn)
    except Exception as exc:
        return CheckOut(name=name, ok=False, detail=_failure(exc)), None
    return CheckOut(name=name, ok=True, detail=detail), more


@router.get(
    "/readyz",
    response_model=ReadyOut,
    responses={
        200: {"description": "Ready: the database (and in Celery mode the broker and a worker per queue) answer"},
        503: {"model": ReadyOut, "description": "Not ready: `failed` names each check that did not pass"},
    },
)
async def readyz(request: Request, factory: SessionFactoryDep, settings: SettingsDep) -> JSONResponse:
    """Say whether this process can take traffic: the database answers, and grading can happen."""
    celery = bool(settings.broker_url)
    jobs = [_checked("database", lambda: _database_checks(factory, settings))]
    if celery:
        jobs.append(_checked("broker", lambda: _ping_broker(settings)))
    (database, queues), *broker = await asyncio.gather(*jobs)
    checks = [database]
    if celery:
        checks.append(broker[0][0])
        if queues is not None:
            checks += queues
        else:
            checks.append(CheckOut(name="queue:*", ok=False, detail="not checked: the database did not answer"))
    else:
        present = getattr(request.app.state, "dispatcher", None) is not None
        detail = "in-process grading pool running" if present else "in-process grading pool not started"
        checks.append(CheckOut(name="dispatcher", ok=present, detail=detail))
    failed = [c.name for c in checks if not c.ok]
    body = ReadyOut(ready=not failed, mode="celery" if celery else "embedded", checks=checks, failed=failed)
    return JSONResponse(body.model_dump(), status_code=503 if failed else 200, headers=NO_STORE)


@router.get(
    "/metrics",
    response_class=Response,
    responses={
        200: {
            "description": "Prometheus text exposition (see app/domain/operations/metrics.py and README, Watch it)",
            "content": {metrics.CONTENT_TYPE: {"schema": {"type": "string"}}},
        },
        **problem_responses(
            401,
            403,
            described={
                401: "GPULAB_METRICS_TOKEN is set and the bearer token is missing or wrong",
                403: "No token is set and the client is not loopback (or came via a proxy)",
            },
        ),
    },
)
async def metrics_text(request: Request, factory: SessionFactoryDep, settings: SettingsDep) -> Response:
    """Return gpulab's metrics, read from the shared database and broker when scraped."""
    metrics.check_access(
        settings=settings,
        authorization=request.headers.get("authorization"),
        client_host=request.client.host if request.client else None,
        headers=dict(request.headers),
    )
    body = await run_in_threadpool(metrics.render, factory, settings)
    return Response(body, media_type=metrics.CONTENT_TYPE, headers=NO_STORE)
