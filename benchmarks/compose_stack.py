"""The shipped stack for ``python -m benchmarks --only compose``: docker-compose.yml as an admin brings it up.

``ComposeStack`` is what ``benchmarks.deployment.Deployment`` is for a stack started by hand: ``docker compose up``
of this checkout's docker-compose.yml (PostgreSQL, Redis, the API, the grading host ``worker-cpu``), built
beforehand by ``docker/build-images``, under a project name of its own, with ``GPULAB_CPU_WORKERS`` = cores and
``GPULAB_WARM_POOLS=auto``. Only for the benchmark, an override file also publishes its PostgreSQL on a free
loopback port, so the phases read each submission's timestamps from the database as they do on the other paths.
``gpu_host=True`` (``--only compose-gpu``) makes its grading host the GPU grading host over stand-in GPUs (see
``_gpu_host``), so the two are measured side by side. It is ready when ``/readyz`` says so and the grading host
logged both its grading pool and its example lane
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

    def __init__(self, workers: int, *, gpu_host: bool = False) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="gpulab-bench-compose-"))
        self.folder.chmod(0o755)
        with socket_port() as port, socket_port() as pg_port:
            self.port, self.pg_port = port, pg_port
        self.password = secrets.token_urlsafe(18)
        override = self.folder / "publish-postgres.yml"
        text = f'services:\n  postgres:\n    ports: ["127.0.0.1:{self.pg_port}:5432"]\n'
        if gpu_host:
            text += self._gpu_host(workers)
        override.write_text(text)
        self.url = f"http://127.0.0.1:{self.port}"
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("GPULAB_", "POSTGRES_", "COMPOSE_"))}
        self.env = {**clean, "GPULAB_SECRET_KEY": secrets.token_urlsafe(48), "POSTGRES_PASSWORD": self.password,
                    "GPULAB_PORT": str(self.port), "GPULAB_COOKIE_SECURE": "false", "GPULAB_WARM_POOLS": "auto",
                    "GPULAB_CPU_WORKERS": str(workers),
                    "GPULAB_GRADING_HOST_SECCOMP": str(REPO / "docker" / "grading-host" / "seccomp.json")}  # fmt: skip
        compose = ["docker-compose"] if shutil.which("docker-compose") else ["docker", "compose"]
        self.base = [*compose, "-p", f"gpulab-bench-{os.getpid()}", "-f", str(REPO / "docker-compose.yml"),
                     "-f", str(override), "--project-directory", str(REPO)]  # fmt: skip

    def _gpu_host(self, workers: int) -> str:
        """Return the override that makes ``worker-cpu`` the GPU grading host over ``workers`` stand-in GPUs.

        On a CPU machine: compose's ``worker-gpu`` is the same recipe and privileges on the GPU image, which
        cannot run here; so the CPU grading host gets what makes a host a GPU host (GPU slots, one per grading,
        a lease per job, the device plan and nodes bound into each sandbox, the health probe before and after
        each job) over stand-in nodes and a stand-in driver table, and takes the same jobs.
        """
        root = self.folder / "gpus"
        proc, dev = root / "proc", root / "dev"
        dev.mkdir(parents=True)
        for index in range(workers):
            bus = f"0000:{index + 1:02x}:00.0"
            info = proc / "driver" / "nvidia" / "gpus" / bus / "information"
            info.parent.mkdir(parents=True)
            info.write_text(f"Model: \t NVIDIA H100\nGPU UUID: \t GPU-{index:08x}-0000-4000-8000-000000000000\n"
                            f"Bus Location: \t {bus}\nDevice Minor: \t {index}\n")  # fmt: skip
            (dev / f"nvidia{index}").write_text("stand-in")
        for name in ("nvidiactl", "nvidia-uvm"):
            (dev / name).write_text("stand-in")
        for path in (root, *root.rglob("*")):
            path.chmod(0o755 if path.is_dir() else 0o644)
        ids = ",".join(str(i) for i in range(workers))
        return (
            "  worker-cpu:\n"
            f"    volumes: ['{root}:{root}:ro']\n"
            "    environment:\n"
            f"      GPULAB_GPU_IDS: '{ids}'\n"
            "      GPULAB_GPUS_PER_JOB: '1'\n"
            f"      GPULAB_GPU_DEV_ROOT: '{dev}'\n"
            f"      GPULAB_GPU_PROC_ROOT: '{proc}'\n"
        )

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
