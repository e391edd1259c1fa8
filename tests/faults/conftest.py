"""Private PostgreSQL and Redis servers and real `gpulab worker` processes, for tests that break them.

Contract:
- ``stack`` (module scope) starts a PostgreSQL cluster of its own (``initdb`` in a temporary folder, run as
  the ``postgres`` user, port ``PG_PORT``) and a Redis server of its own (port ``REDIS_PORT``, append-only file
  on; both ports below the ephemeral range, see ``listen_port``): restarting or emptying them never touches
  the machine's shared servers the rest of the suite uses.
- ``deployment`` (per test) gives a freshly migrated database with the bank synced, an empty Redis, an audit
  table filled by a trigger each time a submission settles (so "graded exactly once" is read, not assumed),
  and ``start_worker()`` / ``start_api()`` that run the real processes with default settings; all are stopped
  at the end and their logs printed on failure.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import pytest
import redis

from app.domain.platform.db import engine_for
from tests.support import child_env, free_port, start_gpulab, wait_for


def listen_port(preferred: int) -> int:
    """Return ``preferred`` or the next port after it that nothing listens on.

    Below the kernel's ephemeral range (32768 and up on Linux): a server restarted on its port mid-test must
    find it free again, and a port in that range can meanwhile be taken as the source port of any outgoing
    connection (that is how a fixed 55432 once failed to bind).
    """
    import socket

    for port in range(preferred, preferred + 200):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {preferred}-{preferred + 199}")


PG_PORT = listen_port(25432)
REDIS_PORT = listen_port(26379)
pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

AUDIT_SQL = """
CREATE TABLE settle_audit (submission_id text NOT NULL, status text NOT NULL, verdict text,
                           at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION audit_settled() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.status IN ('graded', 'error') AND OLD.status NOT IN ('graded', 'error') THEN
    INSERT INTO settle_audit (submission_id, status, verdict) VALUES (NEW.id, NEW.status, NEW.verdict);
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER submissions_settled AFTER UPDATE ON submissions FOR EACH ROW EXECUTE FUNCTION audit_settled();
"""


def _pg_bin() -> Path:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not versions:
        _unavailable("PostgreSQL server binaries (initdb) are not installed")
    return versions[-1].parent


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(reason)
    pytest.skip(reason)


class PrivatePostgres:
    """A throw-away PostgreSQL cluster on ``PG_PORT``, owned by the ``postgres`` user."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.data = root / "data"
        self.bin = _pg_bin()
        self.url_base = f"postgresql://postgres@127.0.0.1:{PG_PORT}"

    def _as_postgres(self, *args: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        account = pwd.getpwnam("postgres")
        os.chown(self.root, account.pw_uid, account.pw_gid)
        self._as_postgres(str(self.bin / "initdb"), "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
        self.start()

    def start(self) -> None:
        options = f"-p {PG_PORT} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200"
        log = str(self.root / "pg.log")
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def fresh_db(self, name: str) -> str:
        with psycopg.connect(f"{self.url_base}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"{self.url_base}/{name}"


class PrivateRedis:
    """A Redis server on ``REDIS_PORT`` with an append-only file, restartable with or without its data."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.process: subprocess.Popen[bytes] | None = None
        self.url = f"redis://127.0.0.1:{REDIS_PORT}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            ["redis-server", "--port", str(REDIS_PORT), "--bind", "127.0.0.1", "--dir", str(self.root),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--logfile", str(self.root / "redis.log")],
        )  # fmt: skip
        wait_for(self._answers, timeout_s=20)

    def _answers(self) -> bool:
        try:
            return bool(redis.Redis.from_url(self.url, socket_timeout=1).ping())
        except redis.RedisError:
            return False

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def restart(self, *, keep_data: bool) -> None:
        """Stop the server hard and start it again, with its append-only file or without any data."""
        self.kill()
        if not keep_data:
            shutil.rmtree(self.root / "appendonlydir", ignore_errors=True)
        self.start()

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)


@dataclass
class Stack:
    postgres: PrivatePostgres
    redis: PrivateRedis


@pytest.fixture(scope="module")
def stack() -> Iterator[Stack]:
    """Start the private PostgreSQL and Redis servers for this module's tests."""
    if os.geteuid() != 0:
        _unavailable("the fault tests run PostgreSQL as its own user and the local sandbox: they need root")
    for tool in ("runuser", "redis-server"):
        if shutil.which(tool) is None:
            _unavailable(f"{tool} is not installed")
    pg_root = Path(tempfile.mkdtemp(prefix="gpulab-faults-pg-"))
    redis_root = Path(tempfile.mkdtemp(prefix="gpulab-faults-redis-"))
    postgres = PrivatePostgres(pg_root)
    private_redis = PrivateRedis(redis_root)
    postgres.init()
    try:
        private_redis.start()
        yield Stack(postgres=postgres, redis=private_redis)
    finally:
        private_redis.kill()
        with contextlib.suppress(subprocess.CalledProcessError):
            postgres.stop("immediate")
        shutil.rmtree(pg_root, ignore_errors=True)
        shutil.rmtree(redis_root, ignore_errors=True)


@dataclass
class Deployment:
    stack: Stack
    env: dict[str, str]
    logs: Path
    processes: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)

    def _start(self, name: str, argv: list[str], **extra: str) -> subprocess.Popen[bytes]:
        process = start_gpulab(argv[1:], child_env(**{**self.env, **extra}), self.logs / f"{name}.log")
        self.processes.append((name, process))
        return process

    def start_worker(self, name: str) -> subprocess.Popen[bytes]:
        """Start `gpulab worker --queues cpu` with default settings and wait until it consumes."""
        process = self._start(name, ["gpulab", "worker", "--queues", "cpu"])
        log = self.logs / f"{name}.log"
        wait_for(lambda: b" ready." in log.read_bytes() or process.poll() is not None, timeout_s=90)
        assert process.poll() is None, log.read_text(errors="replace")
        return process

    def start_api(self, name: str = "api") -> tuple[subprocess.Popen[bytes], str]:
        """Start `gpulab serve` (Celery mode) on a free port; return it and its base URL once it answers."""
        import httpx

        port = free_port()
        process = self._start(name, ["gpulab", "serve", "--port", str(port)])
        base = f"http://127.0.0.1:{port}"

        def answers() -> bool:
            assert process.poll() is None, (self.logs / f"{name}.log").read_text(errors="replace")
            try:
                return httpx.get(f"{base}/login", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(answers, timeout_s=60)
        return process, base

    def audit(self) -> list[tuple[str, str, str | None]]:
        """Return every settling the trigger saw: (submission id, status, verdict)."""
        with psycopg.connect(self.env["database_url"]) as conn:
            return [tuple(row) for row in conn.execute("SELECT submission_id, status, verdict FROM settle_audit")]

    def stop_all(self) -> None:
        for _name, process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def kill_group(process: subprocess.Popen[bytes], sig: signal.Signals = signal.SIGKILL) -> None:
    """Send ``sig`` to the process's whole group (a worker and the sandboxes it started)."""
    os.killpg(process.pid, sig)


@pytest.fixture
def deployment(stack: Stack, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:
    """A migrated, synced database on the private servers, an empty Redis, and no processes yet."""
    from app.domain.exercises.bank import sync_bank
    from app.domain.platform.db import session_scope
    from app.domain.platform.migrate import upgrade
    from tests.support import BANK, configure

    name = "gpulab_fault_" + request.node.name.split("[")[0].removeprefix("test_")[:40]
    url = stack.postgres.fresh_db(name)
    logs = Path(tempfile.mkdtemp(prefix="gpulab-faults-logs-"))
    env = {"mode": "dev", "database_url": url, "broker_url": stack.redis.url, "data_dir": str(logs / "data")}
    configure(monkeypatch, **env)
    upgrade()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(AUDIT_SQL)
    with session_scope() as session:
        sync_bank(session=session, root=BANK)
    stack.redis.client().flushall()
    deployment = Deployment(stack=stack, env=env, logs=logs)
    try:
        yield deployment
    finally:
        deployment.stop_all()
        failed = getattr(request.node, "rep_call", None)
        if failed is not None and failed.failed:
            for log in sorted(logs.glob("*.log")):
                print(f"===== {log.name}\n{log.read_text(errors='replace')[-6000:]}")
        engine_for(url).dispose()
        shutil.rmtree(logs, ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Keep each phase's report on the item, so fixtures can print logs only when the test failed."""
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"rep_{report.when}", report)


def settle_time(start: float) -> float:
    return round(time.monotonic() - start, 1)
