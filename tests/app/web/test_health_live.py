"""``/readyz`` and ``/metrics`` follow a real ``gpulab worker`` and its example-lane companion (PostgreSQL, Redis)."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy.orm import Session

from app.domain.exercises.bank import upsert_exercise
from app.domain.platform.db import Base, engine_for
from app.main import create_app
from app.settings import get_settings
from tests.app.web.test_health import HEALTH_REDIS_URL, client_from, parse, value
from tests.conftest import tiny_files
from tests.support import child_env, configure, fresh_postgres_db, require_service, wait_for
from worker.bank.spec import ExerciseSpec

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, str]]:
    require_service("PostgreSQL", "127.0.0.1", 5432)
    require_service("Redis", "127.0.0.1", 6379)
    settings_env = {
        "mode": "dev",
        "database_url": fresh_postgres_db("gpulab_test_health_live"),
        "broker_url": HEALTH_REDIS_URL,
        "data_dir": str(tmp_path / "data"),
    }
    configure(monkeypatch, **settings_env)
    Base.metadata.create_all(engine_for(get_settings().database_url))
    redis.Redis.from_url(HEALTH_REDIS_URL).flushdb()
    yield settings_env
    redis.Redis.from_url(HEALTH_REDIS_URL).flushdb()
    get_settings.cache_clear()
    engine_for.cache_clear()


def _ready(application: Any) -> tuple[int, list[str]]:
    response = client_from(application).get("/readyz")
    return response.status_code, response.json()["failed"]


def test_readyz_follows_a_real_worker_from_start_to_graceful_stop(env: dict[str, str], tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:12]
    with Session(engine_for(get_settings().database_url)) as session:
        spec = ExerciseSpec.from_files(f"live-{tag}", tiny_files(prompt_md="# Add\n", queue="cpu", tag=tag))
        upsert_exercise(session=session, spec=spec)
        session.commit()
    application = create_app(get_settings())
    application.state.recover_on_start = False
    assert _ready(application) == (503, ["queue:cpu", "queue:examples-cpu"])

    log = tmp_path / "worker.log"
    with log.open("wb") as sink:
        worker = subprocess.Popen(
            ["gpulab", "worker", "--queues", "cpu", "--concurrency", "1"],
            env=child_env(**env), stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        wait_for(lambda: _ready(application)[0] == 200 or worker.poll() is not None, timeout_s=120, interval_s=0.5)
        assert worker.poll() is None, log.read_text(errors="replace")
        samples = parse(client_from(application).get("/metrics").text)
        assert value(samples, "gpulab_workers_live", queue="cpu") >= 1
        assert value(samples, "gpulab_workers_live", queue="examples-cpu") >= 1
        assert value(samples, "gpulab_broker_up") == 1

        worker.send_signal(signal.SIGTERM)  # a graceful stop marks the beat stopped: not ready at once
        worker.wait(timeout=60)
        status, failed = _ready(application)
        assert status == 503 and "queue:cpu" in failed, log.read_text(errors="replace")
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
