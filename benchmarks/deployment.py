"""The deployment path for ``python -m benchmarks --only deploy,deploy-cold,deploy-local``: PostgreSQL, Redis, Celery.

``Deployment`` is what ``benchmarks.__main__.Server`` is for the embedded server, for the path a course
deploys: a fresh PostgreSQL database on the local server (``BENCH_PG``, trust auth), a Redis database index of
its own on the local Redis (``BENCH_REDIS``, flushed before and after), one ``gpulab worker --queues cpu``
with ``GPULAB_GRADING_WORKERS`` = cores, and ``gpulab serve --workers 2`` in front. The worker grades on the
``docker`` sandbox (``warm``: the default warm container pairs; cold: ``GPULAB_WARM_POOLS=off``) or, as a
grading node without a Docker engine would, on the ``local`` sandbox with its warm templates. It is ready
when ``/readyz`` says so and, warm, when the worker's pairs or templates for the three exercises are up.
``pin_api`` gives the two API processes CPU 0 of their own and moves everything else (the worker and its
sandboxes, PostgreSQL, Redis, the load generator) to the other CPUs, restoring PostgreSQL's and Redis's
affinity on exit. ``deadline_burst`` is the
issue's deadline burst: ``count`` submissions spread evenly over ``over_s`` seconds, each one's
submit->verdict taken from the database (``finished_at - created_at``), none lost.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import EMAIL, GPULAB, PASSWORD, Served, copy_bank, pct, worker_prewarmed

BENCH_PG = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
BENCH_REDIS = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379")
REDIS_DB = 13  # the benchmark's own index, flushed before and after
BEAT_WAIT_S = 12.0  # a heartbeat interval (10 s by default) and some: the next beats carry what just happened
STEADY_S = 20.0  # warm pairs are up once their count has not changed for this long (the budget may stop short)


def _warm_containers() -> int:
    out = subprocess.run(["docker", "ps", "-q", "--filter", "label=gpulab.warm"], capture_output=True, text=True)
    return len(out.stdout.split())


class Deployment(Served):
    """PostgreSQL + Redis + a Celery worker on the docker sandbox + ``gpulab serve --workers 2``."""

    tiebreak = "id"  # the submissions' second sort key (SQLite has rowid)

    def __init__(self, warm: bool, workers: int, slugs: list[str] | None, sandbox: str = "docker",
                 pin_api: bool = False) -> None:  # fmt: skip
        """``slugs``: the exercises its private bank holds (None: the bank as shipped)."""
        import psycopg

        self.warm = warm
        self.sandbox = sandbox
        self.pin_api = pin_api
        self.workers = workers
        self.data = Path(tempfile.mkdtemp(prefix="gpulab-bench-deploy-"))
        self.data.chmod(0o755)
        bank = copy_bank(self.data / "exercises", slugs)
        self.database = f"gpulab_bench_{os.getpid()}"
        with psycopg.connect(f"{BENCH_PG}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.database}"')
            conn.execute(f'CREATE DATABASE "{self.database}"')
        self.database_url = f"{BENCH_PG}/{self.database}"
        self.broker_url = f"{BENCH_REDIS}/{REDIS_DB}"
        with socket_port() as port:
            self.port = port
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**{k: v for k, v in os.environ.items() if not k.startswith("GPULAB_")},
                    "GPULAB_MODE": "dev", "GPULAB_DATA_DIR": str(self.data), "GPULAB_DATABASE_URL": self.database_url,
                    "GPULAB_BROKER_URL": self.broker_url, "GPULAB_SANDBOX": sandbox,
                    "GPULAB_CGROUP_NAME": "gpulab-bench",
                    "GPULAB_WARM_POOLS": "auto" if warm else "off", "GPULAB_GRADING_WORKERS": str(workers),
                    "GPULAB_EXERCISES_DIR": str(bank), "GPULAB_SECRET_KEY": "b" * 48,
                    "TMPDIR": str(self.data)}  # fmt: skip
        self.procs: list[subprocess.Popen[bytes]] = []
        self.slugs = slugs

    def gpulab(self, *args: str, stdin: str | None = None) -> None:
        subprocess.run([str(GPULAB), *args], env=self.env, input=stdin, text=True, check=True, capture_output=True)

    def _start(self, name: str, *args: str, cpus: str = "") -> None:
        log = open(self.data / f"{name}.log", "wb")  # noqa: SIM115 - kept open for the process's life
        pin = ["taskset", "-c", cpus] if cpus else []
        self.procs.append(subprocess.Popen([*pin, str(GPULAB), *args], env=self.env, stdout=log, stderr=log,
                                           start_new_session=True))  # fmt: skip

    def _pin_services(self, cpus: str) -> None:
        """Set the CPU affinity of every PostgreSQL and Redis process (new backends inherit the postmaster's)."""
        pids = subprocess.run(["pgrep", "-f", "postgres|redis-server"], capture_output=True, text=True).stdout.split()
        for pid in pids:
            subprocess.run(["taskset", "-a", "-p", "-c", cpus, pid], capture_output=True)

    def __enter__(self) -> Deployment:
        import redis

        redis.Redis.from_url(self.broker_url).flushdb()
        self.gpulab("db", "upgrade")
        self.gpulab("exercises", "sync")
        self.gpulab("user", "add", EMAIL, "--role", "learner", "--password-stdin", stdin=PASSWORD + "\n")
        cores = os.cpu_count() or 2
        api_cpus, rest_cpus = ("0", f"1-{cores - 1}") if self.pin_api else ("", "")
        if self.pin_api:
            self._pin_services(rest_cpus)
            os.sched_setaffinity(0, set(range(1, cores)))  # the load generator too
        self._start("worker", "worker", "--queues", "cpu", cpus=rest_cpus)
        self._start("serve", "serve", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "2",
                    cpus=api_cpus)  # fmt: skip
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        else:
            raise RuntimeError("the deployment did not become ready: " + self.logs())
        if self.warm and self.sandbox == "local":  # the worker's and its example lane's templates
            while not worker_prewarmed((self.data / "worker.log").read_text(errors="replace")):
                if time.monotonic() > deadline:
                    raise RuntimeError("the worker's warm templates did not come up: " + self.logs())
                time.sleep(0.5)
        elif self.warm:  # measuring while the pairs import their frameworks would charge that to the first samples
            seen, since = -1, time.monotonic()
            while (count := _warm_containers()) == 0 or count != seen or time.monotonic() - since < STEADY_S:
                if count != seen:
                    seen, since = count, time.monotonic()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the warm containers did not settle ({count} up)")
                time.sleep(1.0)
        return self

    def logs(self) -> str:
        return "".join((self.data / f"{n}.log").read_text(errors="replace")[-1500:] for n in ("worker", "serve")
                       if (self.data / f"{n}.log").exists())  # fmt: skip

    def __exit__(self, *exc: object) -> None:
        import psycopg
        import redis

        if self.pin_api:
            every = f"0-{(os.cpu_count() or 2) - 1}"
            self._pin_services(every)
            os.sched_setaffinity(0, set(range(os.cpu_count() or 2)))
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        left = subprocess.run(["docker", "ps", "-aq", "--filter", "label=gpulab.job"], capture_output=True, text=True)
        if left.stdout.split():
            subprocess.run(["docker", "rm", "-f", *left.stdout.split()], capture_output=True)
        redis.Redis.from_url(self.broker_url).flushdb()
        with psycopg.connect(f"{BENCH_PG}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
        shutil.rmtree(self.data, ignore_errors=True)

    def db(self) -> Any:
        import psycopg

        return psycopg.connect(self.database_url)


class socket_port:
    """Find a free TCP port on 127.0.0.1."""

    def __enter__(self) -> int:
        import socket

        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        return int(self._sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self._sock.close()


def deadline_burst(server: Any, mix: list[tuple[str, str]], count: int, over_s: float) -> dict[str, Any]:
    """Submit ``count`` submissions of ``mix`` (``(slug, code)`` in turn) evenly over ``over_s`` seconds.

    Reports each one's submit->verdict, and the share of the workers' template (or pair) requests in the burst
    that found a warm one (``warm_hit_share``, from their beats, read once a beat after the burst has passed).
    """
    client = server.client()
    accepted: list[str] = []
    before = server.warm_counts()
    started = time.monotonic()
    for i in range(count):
        delay = started + i * over_s / count - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        slug, code = mix[i % len(mix)]
        response = client.post(f"/api/exercises/{slug}/submissions", json={"code": code})
        if response.status_code == 202:
            accepted.append(str(response.json()["id"]))
    server.drain()
    time.sleep(BEAT_WAIT_S)  # the workers' next beats carry the burst's hits and misses
    after = server.warm_counts()
    hits, misses = after["hits"] - before["hits"], after["misses"] - before["misses"]
    with server.db() as db:
        rows = db.execute(
            "SELECT status, verdict, EXTRACT(EPOCH FROM (finished_at - created_at)) FROM submissions "
            "WHERE id = ANY(%s)", (accepted,),
        ).fetchall()  # fmt: skip
    seconds = [float(r[2]) for r in rows if r[2] is not None]
    return {"submitted": count, "exercises": len(mix), "over_s": over_s, "accepted": len(accepted),
            "graded": len(rows), "warm_hits": hits, "warm_misses": misses,
            "warm_hit_share": hits / (hits + misses) if hits + misses else None,
            "lost": len(accepted) - len(rows), "statuses": sorted({r[0] for r in rows}),
            "verdicts": sorted({str(r[1]) for r in rows}), "p50_s": pct(seconds, 50), "p95_s": pct(seconds, 95),
            "max_s": max(seconds, default=float("nan"))}  # fmt: skip
