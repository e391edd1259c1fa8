"""A graceful stop leaves no warm container pair running: `gpulab serve` and `gpulab worker` on a real engine.

SIGTERM is how `docker stop`, systemd and Ctrl-C stop a process. uvicorn ends a SIGTERM'd server by raising the
signal again after its lifespan, so no exit hook runs; the lifespan (and a worker's shutdown) must close the pools
themselves, within compose's stop grace period (10 s). Each pool labels its containers with its process id
(``LABEL_OWNER``), so the test finds exactly the pairs of the process it stopped.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.support import (
    BANK,
    child_env,
    free_port,
    require_service,
    start_gpulab,
    stop_gracefully,
    wait_for,
    wait_until_ready,
)
from tests.worker.test_sandbox_docker import _unavailable
from worker.core.errors import SandboxUnavailable
from worker.grading.sandbox.docker import API_VERSION, APIClient, DockerSandbox
from worker.grading.sandbox.docker_warm import LABEL_OWNER

pytestmark = [pytest.mark.docker, pytest.mark.slow]

SLUG = "python-split-batch"
COMPOSE_GRACE_S = 10.0  # docker compose stop's default: SIGKILL follows
REDIS_URL = "redis://127.0.0.1:6379/12"


def _owned_by(pid: int) -> list[str]:
    """Return the names of the running or stopped containers that a pool of process ``pid`` made."""
    api = APIClient(version=API_VERSION, timeout=15)
    try:
        found = api.containers(all=True, filters={"label": LABEL_OWNER})
    finally:
        api.close()
    return [c["Names"][0] for c in found if (c.get("Labels") or {}).get(LABEL_OWNER, "").startswith(f"{pid}:")]


@pytest.fixture
def engine() -> None:
    try:
        DockerSandbox(api_timeout_s=15).check()
    except SandboxUnavailable as exc:
        _unavailable(f"the docker sandbox cannot run here: {exc}")


@pytest.fixture
def bank_env(tmp_path: Path, engine: None) -> Iterator[dict[str, str]]:
    """A SQLite install with a private bank of one plain-Python exercise, graded in warm docker pairs."""
    bank = tmp_path / "bank"
    shutil.copytree(BANK / SLUG, bank / SLUG, ignore=shutil.ignore_patterns("__pycache__"))
    env = child_env(
        mode="dev", data_dir=str(tmp_path / "data"), secret_key="s" * 48, sandbox="docker", warm_pools="python",
        exercises_dir=str(bank), grading_workers="2",
    )  # fmt: skip
    for step in (["db", "upgrade"], ["exercises", "sync"]):
        done = subprocess.run(["gpulab", *step], env=env, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    yield env


def _stop_and_check(process: subprocess.Popen[bytes], log: Path) -> None:
    """Wait for the process's pairs, SIGTERM it, and check it exits in the grace period leaving none behind."""
    wait_for(lambda: len(_owned_by(process.pid)) >= 4 or process.poll() is not None, timeout_s=180)
    assert process.poll() is None, log.read_text(errors="replace")
    pairs = _owned_by(process.pid)
    assert len(pairs) >= 4, pairs  # two pairs (two workers' worth) of two containers each
    started = time.monotonic()
    process.terminate()
    try:
        process.wait(timeout=COMPOSE_GRACE_S)
    except subprocess.TimeoutExpired:
        stop_gracefully(process, timeout_s=1)
        pytest.fail(f"it did not stop within {COMPOSE_GRACE_S:g} s of SIGTERM:\n{log.read_text(errors='replace')}")
    assert _owned_by(process.pid) == [], f"left running after {time.monotonic() - started:.1f} s: {pairs}"


def test_serve_removes_its_warm_pairs_on_sigterm(bank_env: dict[str, str], tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    process = start_gpulab(["serve", "--port", str(free_port())], bank_env, log)
    try:
        _stop_and_check(process, log)
    finally:
        stop_gracefully(process)


def test_a_worker_stopped_as_soon_as_its_pairs_exist_removes_them(bank_env: dict[str, str], tmp_path: Path) -> None:
    # Often before Celery is ready (docker stop during start-up): the pairs the prewarm made must go all the same.
    require_service("Redis", "127.0.0.1", 6379)
    log = tmp_path / "worker.log"
    env = {**bank_env, "GPULAB_BROKER_URL": REDIS_URL}
    process = start_gpulab(["worker", "--queues", "cpu", "--examples-concurrency", "0"], env, log)
    try:
        _stop_and_check(process, log)
    finally:
        stop_gracefully(process)


def test_a_worker_removes_its_warm_pairs_on_sigterm(bank_env: dict[str, str], tmp_path: Path) -> None:
    require_service("Redis", "127.0.0.1", 6379)
    redis.Redis.from_url(REDIS_URL).flushdb()
    log = tmp_path / "worker.log"
    env = {**bank_env, "GPULAB_BROKER_URL": REDIS_URL}
    process = start_gpulab(["worker", "--queues", "cpu", "--examples-concurrency", "0"], env, log)
    try:
        wait_until_ready(log, process, timeout_s=120)  # Celery's own SIGTERM handling (a warm shutdown) is on
        _stop_and_check(process, log)
    finally:
        stop_gracefully(process)
