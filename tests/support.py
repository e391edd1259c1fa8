"""Helpers shared by the integration tests: configure gpulab for a test, seed data, wait, find services."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from app.domain.platform.db import engine_for
from app.settings import get_settings
from worker.core.config import REPO_ROOT

BANK = REPO_ROOT / "exercises"
PG_ADMIN_URL = os.environ.get("GPULAB_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_URL = os.environ.get("GPULAB_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def service_up(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def require_service(name: str, host: str, port: int) -> None:
    """Skip when a service is down, except under CI where a missing service is a failure."""
    if service_up(host, port):
        return
    message = f"{name} is not reachable on {host}:{port}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def configure(monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
    """Set GPULAB_* variables for this test and drop every cache built from the old ones."""
    for key in list(os.environ):
        if key.startswith("GPULAB_") and not key.startswith("GPULAB_TEST_"):
            monkeypatch.delenv(key)
    for key, value in {"warm_pools": "off", **env}.items():  # cold unless asked: see tests/conftest.py
        monkeypatch.setenv(f"GPULAB_{key.upper()}", value)
    get_settings.cache_clear()
    engine_for.cache_clear()


def fresh_postgres_db(name: str) -> str:
    """Drop and create database ``name``; return its URL."""
    import psycopg

    with psycopg.connect(PG_ADMIN_URL.replace("postgresql://", "postgresql://", 1), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    return PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"


def wait_for(predicate: Callable[[], object], *, timeout_s: float, interval_s: float = 0.1) -> object:
    """Poll ``predicate`` until it returns something truthy; fail the test on timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)
    pytest.fail(f"condition not met within {timeout_s} s")


def bank_file(slug: str, path: str) -> str:
    return (BANK / slug / path).read_text(encoding="utf-8")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def child_env(**env: str) -> dict[str, str]:
    """Return an environment for a gpulab subprocess: this one without GPULAB_*, plus ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("GPULAB_")}
    base.update({f"GPULAB_{k.upper()}": v for k, v in {"warm_pools": "off", **env}.items()})  # cold unless asked
    base["PATH"] = f"{Path(REPO_ROOT / '.venv' / 'bin')}:{base.get('PATH', '')}"
    return base


def start_gpulab(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start ``gpulab ARGS`` with the complete environment ``env`` (see ``child_env``), its output appended to
    ``log``, in a process group of its own (a group kill takes its sandboxes and companions with it)."""
    with log.open("ab") as sink:
        return subprocess.Popen(
            ["gpulab", *args], env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
        )


def wait_until_ready(log: Path, process: subprocess.Popen[bytes], *, count: int = 1, timeout_s: float = 90) -> None:
    """Wait until ``log`` shows ``count`` Celery workers ready (a worker and its companion count two)."""
    wait_for(lambda: log.read_bytes().count(b" ready.") >= count or process.poll() is not None, timeout_s=timeout_s)
    assert process.poll() is None, log.read_text(errors="replace")


def stop_gracefully(process: subprocess.Popen[bytes], timeout_s: float = 40) -> None:
    """SIGTERM the process (its own warm shutdown), then SIGKILL its group if it does not exit in time."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
