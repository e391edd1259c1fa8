"""The shipped stack for ``python -m benchmarks --only compose``: docker-compose.yml as an admin brings it up.

``ComposeStack`` is what ``benchmarks.deployment.Deployment`` is for a stack started by hand: ``docker compose up``
of this checkout's docker-compose.yml (PostgreSQL, Redis, the API, the grading host ``worker-cpu``), built
beforehand by ``docker/build-images``, under a project name of its own, with ``GPULAB_CPU_WORKERS`` = cores and
``GPULAB_WARM_POOLS=auto``. Only for the benchmark, an override file also publishes its PostgreSQL on a free
loopback port, so the phases read each submission's timestamps from the database as they do on the other paths.
It is ready when ``/readyz`` says so and the grading host logged both its grading pool and its example lane
prewarmed; ``down -v`` removes it afterwards.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import EMAIL, PASSWORD, REPO, Served, worker_prewarmed
from benchmarks.deployment import socket_port

READY_S = 600.0


class ComposeStack(Served):
    """docker-compose.yml up, with its PostgreSQL published on loopback for the benchmark's reads."""

    tiebreak = "id"

    def __init__(self, workers: int) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="gpulab-bench-compose-"))
        with socket_port() as port, socket_port() as pg_port:
            self.port, self.pg_port = port, pg_port
        self.password = secrets.token_urlsafe(18)
        override = self.folder / "publish-postgres.yml"
        override.write_text(f'services:\n  postgres:\n    ports: ["127.0.0.1:{self.pg_port}:5432"]\n')
        self.url = f"http://127.0.0.1:{self.port}"
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("GPULAB_", "POSTGRES_", "COMPOSE_"))}
        self.env = {**clean, "GPULAB_SECRET_KEY": secrets.token_urlsafe(48), "POSTGRES_PASSWORD": self.password,
                    "GPULAB_PORT": str(self.port), "GPULAB_COOKIE_SECURE": "false", "GPULAB_WARM_POOLS": "auto",
                    "GPULAB_CPU_WORKERS": str(workers),
                    "GPULAB_GRADING_HOST_SECCOMP": str(REPO / "docker" / "grading-host" / "seccomp.json")}  # fmt: skip
        compose = ["docker-compose"] if shutil.which("docker-compose") else ["docker", "compose"]
        self.base = [*compose, "-p", f"gpulab-bench-{os.getpid()}", "-f", str(REPO / "docker-compose.yml"),
                     "-f", str(override), "--project-directory", str(REPO)]  # fmt: skip

    def compose(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run([*self.base, *args], env=self.env, input=stdin, capture_output=True, text=True,
                                timeout=READY_S)  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"compose {' '.join(args)} failed: {result.stdout}{result.stderr}")
        return result.stdout

    def __enter__(self) -> ComposeStack:
        self.compose("up", "-d", "--no-build")
        deadline = time.monotonic() + READY_S
        while True:
            try:
                if httpx.get(self.url + "/readyz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the compose stack did not become ready: " + self.logs())
            time.sleep(1)
        self.compose("exec", "-T", "api", "gpulab", "user", "add", EMAIL, "--role", "learner", "--password-stdin",
                     stdin=PASSWORD + "\n")  # fmt: skip
        while not worker_prewarmed(self.compose("logs", "--no-color", "worker-cpu")):
            if time.monotonic() > deadline:
                raise RuntimeError("the grading host's warm templates did not come up: " + self.logs())
            time.sleep(1)
        return self

    def logs(self) -> str:
        return self.compose("logs", "--no-color", "--tail", "60")

    def __exit__(self, *exc: object) -> None:
        subprocess.run([*self.base, "down", "-v", "--timeout", "20"], env=self.env, capture_output=True, timeout=300)

    def db(self) -> Any:
        import psycopg

        return psycopg.connect(f"postgresql://gpulab:{self.password}@127.0.0.1:{self.pg_port}/gpulab")
