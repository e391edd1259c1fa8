"""The ``docker`` backend: two fresh, locked-down containers per run (judge, subject), via the Engine API.

Contract (on top of ``worker/grading/sandbox/base.py``, whose table it follows role by role):
- Needs a Docker engine (``scripts/dockerd``) and the grading image (``docker/build-image``) whose
  ``gpulab.runner`` label is this worker's ``runner_digest()``; ``check()`` says which is missing or stale.
- A run (``run_job``) is two containers of that image, ``python3 -m runner.judge /job`` as uid 10002 and
  ``python3 -m runner.subject /job`` as uid 10001, each seeing only its ``ROLE_MOUNTS`` and sharing only
  the host folder ``ipc/``. Both: no network, read-only root, every capability dropped,
  no-new-privileges, the seccomp rules of ``seccomp.py`` as a Docker profile (``seccomp.docker_profile``), memory
  limit = memory+swap limit, pids limit, CPU quota, CPU/file-size/open-files/core rlimits, sized ``/tmp``
  and ``/dev/shm`` tmpfs, private IPC, a tiny init as pid 1, no logging driver (nothing lands on the
  engine's disk). The result is read back from the bind-mounted ``out/``.
- Output comes over attach streams, capped like the other backends. The wall clock (``limits.timeout_s`` +
  margin) is kept here, not by the engine; when the judge exits or the clock runs out both containers are
  killed, and both are force-removed in ``finally`` after every outcome, timeouts and errors included.
- Every Engine API call is bounded by ``api_timeout_s``: a daemon that stops answering makes ``run`` raise
  ``PlatformError`` (retried) instead of hanging the worker. A container it could not remove carries a
  ``gpulab.deadline`` label and is removed by a later ``check()`` (``reap_stale``).
- GPU workers (``gpu_slots``) give each run's subject GPUs of its own (``gpus.py``) as an NVIDIA device
  request for exactly those ids, and a ``/dev/shm`` of at least ``GPU_SHM_MB`` for NCCL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import logging
import os
import socket
import struct
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar

import docker.errors
import requests

# The SDK by module path: the repository's docker/ folder (image build files) would otherwise shadow the
# package for mypy, which resolves namespace folders in the working directory first.
from docker.api.client import APIClient
from docker.types import DeviceRequest, LogConfig, Ulimit

from worker.bank.spec import Limits
from worker.core.errors import PlatformError, SandboxUnavailable
from worker.grading.boot.linux import returncode
from worker.grading.sandbox.base import ROLE_MOUNTS, SandboxRun
from worker.grading.sandbox.gpus import GpuLease, GpuSlots
from worker.grading.sandbox.policy import (
    JOB_MOUNT,
    OPEN_FILES,
    RUNNER_DIR,
    SANDBOX_RUNNER_ROOT,
    cpu_rlimit_s,
    hard_output_cap,
    role_limits,
    sandbox_env,
)
from worker.grading.sandbox.process import Capped
from worker.grading.sandbox.seccomp import docker_profile

log = logging.getLogger(__name__)

# 1.41 is Docker 20.10 (Debian 12's docker.io); newer engines still serve it, and a fixed version means no
# version probe when the client is made.
API_VERSION = "1.41"
DEFAULT_URL = "unix:///var/run/docker.sock"
SUBJECT_UID = 10001  # the image's ``sandbox`` user (Dockerfile.gpu)
JUDGE_UID = 10002  # the image's ``judge`` user
GPU_SHM_MB = 2048
GPU_WAIT_S = 300.0
LINGER_S = 1.0
POLL_S = 0.05
REAP_GRACE_S = 60.0
READ_CHUNK = 65536
STDOUT, STDERR = 1, 2
LABEL_JOB = "gpulab.job"
LABEL_DEADLINE = "gpulab.deadline"
LABEL_RUNNER = "gpulab.runner"
LABEL_ROLE = "gpulab.role"
HINT = "start dockerd (scripts/dockerd) and build the grading image (docker/build-image)"
ENGINE_ERRORS = (requests.exceptions.RequestException, docker.errors.DockerException, OSError)

T = TypeVar("T")


@lru_cache
def runner_digest(runner_dir: Path = RUNNER_DIR) -> str:
    """Return a short hash of the runner's source, the label a matching grading image carries."""
    digest = hashlib.sha256()
    for path in sorted(runner_dir.rglob("*.py")):
        digest.update(path.relative_to(runner_dir).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Bind:
    source: Path
    target: str
    read_only: bool = True


@dataclass(frozen=True)
class ContainerSpec:
    """Everything one container run needs: what to run, what it sees, and what it may use."""

    image: str
    argv: tuple[str, ...]
    binds: tuple[Bind, ...]
    env: dict[str, str]
    limits: Limits
    labels: dict[str, str] = field(default_factory=dict)
    gpu_ids: tuple[str, ...] = ()
    workdir: str = JOB_MOUNT
    user: str = f"{SUBJECT_UID}:{SUBJECT_UID}"
    name: str = ""


def host_config_args(spec: ContainerSpec) -> dict[str, Any]:
    """Return the ``create_host_config`` arguments that lock the container down and size it."""
    limits = spec.limits
    memory = limits.memory_mb * 1024 * 1024
    cpu_soft_s, cpu_hard_s = cpu_rlimit_s(limits)
    fsize = limits.file_size_mb * 1024 * 1024
    shm_mb = max(limits.tmpfs_mb, GPU_SHM_MB) if spec.gpu_ids else limits.tmpfs_mb
    args: dict[str, Any] = {
        "binds": {str(b.source): {"bind": b.target, "mode": "ro" if b.read_only else "rw"} for b in spec.binds},
        "network_mode": "none",
        "read_only": True,
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges", f"seccomp={docker_profile()}"],
        "privileged": False,
        "init": True,
        "ipc_mode": "private",
        "mem_limit": memory,
        "memswap_limit": memory,  # equal: no swap on top of the limit
        "pids_limit": limits.pids,
        "nano_cpus": int(limits.cpus * 1e9),
        "ulimits": [
            Ulimit(name="cpu", soft=cpu_soft_s, hard=cpu_hard_s),
            Ulimit(name="fsize", soft=fsize, hard=fsize),
            Ulimit(name="nofile", soft=OPEN_FILES, hard=OPEN_FILES),
            Ulimit(name="core", soft=0, hard=0),
        ],
        "tmpfs": {"/tmp": f"rw,nosuid,nodev,size={limits.tmpfs_mb}m,mode=1777"},  # noqa: S108 - the container's own
        "shm_size": f"{shm_mb}m",
        "log_config": LogConfig(type=LogConfig.types.NONE),
        "auto_remove": False,  # removed by us after inspecting OOMKilled and the exit code
    }
    if spec.gpu_ids:
        args["device_requests"] = [device_request(spec.gpu_ids)]
    return args


def device_request(gpu_ids: tuple[str, ...]) -> DeviceRequest:
    """Return the NVIDIA device request for exactly ``gpu_ids`` (never ``count=-1``: all GPUs)."""
    return DeviceRequest(driver="nvidia", device_ids=list(gpu_ids), capabilities=[["gpu"]])


def create_args(spec: ContainerSpec) -> dict[str, Any]:
    """Return the ``create_container`` arguments other than the host config."""
    env = dict(spec.env)
    if spec.gpu_ids:
        # nvidia-smi (utility) and CUDA (compute); which GPUs is the device request's job, not this.
        env["NVIDIA_DRIVER_CAPABILITIES"] = "compute,utility"
    return {
        "image": spec.image,
        "command": list(spec.argv),
        "name": spec.name or None,
        "user": spec.user,
        "environment": env,
        "working_dir": spec.workdir,
        "labels": dict(spec.labels),
        "hostname": "gpulab",
        "network_disabled": True,
        "stdin_open": False,
        "tty": False,
    }


class _Pump(threading.Thread):
    """Read the attach stream's frames into capped stdout/stderr until EOF or ``stop``; flag the hard cap."""

    def __init__(self, sock: socket.socket, output_bytes: int, hard_cap_bytes: int) -> None:
        super().__init__(name="gpulab-docker-output", daemon=True)
        self.sock = sock
        self.streams = {STDOUT: Capped(output_bytes), STDERR: Capped(output_bytes)}
        self.hard_cap_bytes = hard_cap_bytes
        self.exceeded = False
        self.done = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        buffer = b""
        try:
            # A short socket timeout lets ``stop`` end the read even if the engine never closes the stream.
            self.sock.settimeout(0.2)
            while not self.stop.is_set():
                try:
                    chunk = self.sock.recv(READ_CHUNK)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not chunk:
                    return
                if self.exceeded:
                    continue  # keep draining: an engine whose stream is not read can stall its kill
                buffer += chunk
                while len(buffer) >= 8:
                    kind, size = struct.unpack(">BxxxL", buffer[:8])
                    if len(buffer) < 8 + size:
                        break
                    self.streams.get(kind, self.streams[STDERR]).add(buffer[8 : 8 + size])
                    buffer = buffer[8 + size :]
                if sum(s.total for s in self.streams.values()) > self.hard_cap_bytes:
                    self.exceeded = True
        finally:
            self.done.set()


def _raw_socket(attached: Any) -> socket.socket:
    """Return the real socket under what ``attach_socket`` gives back (a ``SocketIO`` for unix sockets)."""
    inner = getattr(attached, "_sock", attached)
    if not isinstance(inner, socket.socket):
        raise PlatformError(f"unexpected attach stream from the docker engine: {type(attached).__name__}")
    return inner


def engine_call(what: str, call: Callable[[], T]) -> T:
    """Run one Engine API call; turn the engine's failures (timeouts included) into ``PlatformError``."""
    try:
        return call()
    except ENGINE_ERRORS as exc:
        raise PlatformError(f"docker engine failed to {what}: {type(exc).__name__}: {exc}") from exc


@dataclass
class Attached:
    """A created container, its attach stream and the thread reading it."""

    name: str
    attached: Any
    pump: _Pump


def create(api: APIClient, spec: ContainerSpec) -> None:
    """Create ``spec``'s container (not started)."""
    host_config = api.create_host_config(**host_config_args(spec))
    try:
        engine_call("create a container", lambda: api.create_container(**create_args(spec), host_config=host_config))
    except PlatformError as exc:
        if isinstance(exc.__cause__, docker.errors.ImageNotFound):
            raise SandboxUnavailable(f"grading image {spec.image} is missing: {HINT}") from exc
        raise


def _create(api: APIClient, spec: ContainerSpec, output_bytes: int, hard_cap_bytes: int) -> Attached:
    """Create ``spec``'s container and attach to its output (before start, so nothing is missed)."""
    create(api, spec)
    return attach(api, spec.name, output_bytes, hard_cap_bytes)


def attach(api: APIClient, name: str, output_bytes: int, hard_cap_bytes: int) -> Attached:
    """Attach to the container ``name``'s output (from now on) and start reading it."""
    attached = engine_call("attach to a container", lambda: api.attach_socket(name))
    try:
        pump = _Pump(_raw_socket(attached), output_bytes, hard_cap_bytes)
    except PlatformError:
        attached.close()
        raise
    pump.start()
    return Attached(name, attached, pump)


def _kill(api: APIClient, name: str) -> None:
    """Kill the container; one that already stopped is fine."""
    try:
        api.kill(name)
    except docker.errors.APIError as exc:
        if exc.status_code != 409:  # 409: not running any more
            raise PlatformError(f"docker engine failed to kill {name}: {exc}") from exc
    except ENGINE_ERRORS as exc:
        raise PlatformError(f"docker engine failed to kill {name}: {type(exc).__name__}: {exc}") from exc


def run_job(
    api: APIClient,
    judge: ContainerSpec,
    subject: ContainerSpec,
    *,
    timeout_s: float,
    output_bytes: int,
    hard_cap_bytes: int,
) -> SandboxRun:
    """Run the judge and the subject containers until the judge exits or the clock runs out; remove both.

    The result follows ``base.py``: the judge's exit and clock, the subject's capped output and OOM kill.
    """
    specs = [dataclasses.replace(s, name=s.name or f"gpulab-{uuid.uuid4().hex}") for s in (judge, subject)]
    started: dict[str, Attached] = {}
    try:
        # The judge's output is for operators only: capped, but never a reason to stop the run.
        started["judge"] = _create(api, specs[0], output_bytes, sys.maxsize)
        started["subject"] = _create(api, specs[1], output_bytes, hard_cap_bytes)
        clock = time.monotonic()
        for role in ("judge", "subject"):
            engine_call(f"start the {role}", functools.partial(api.start, started[role].name))
        return settle(api, started, clock=clock, timeout_s=timeout_s)
    finally:
        release(api, started, [spec.name for spec in specs])


def settle(api: APIClient, started: dict[str, Attached], *, clock: float, timeout_s: float) -> SandboxRun:
    """Wait for the running pair's judge (or the clock), kill both and return what the run gave.

    Both containers are running and attached (``started["judge"]``, ``started["subject"]``), ``clock`` is when
    they were let go; the caller removes them (``release``) whatever happens.
    """
    judge_run, subject_run = started["judge"], started["subject"]
    exit_code, timed_out = _await_judge(api, judge_run, subject_run.pump, clock + timeout_s)
    # The verdict is the judge's; whatever the learner left running ends with it.
    for run in (subject_run, judge_run):
        _kill(api, run.name)
    if exit_code is None:
        with contextlib.suppress(*ENGINE_ERRORS):
            exit_code = api.wait(judge_run.name, timeout=api.timeout)["StatusCode"]
    for run in (judge_run, subject_run):
        run.pump.done.wait(LINGER_S)
    states = {
        role: engine_call(f"inspect the {role}", functools.partial(api.inspect_container, run.name))["State"]
        for role, run in started.items()
    }
    wall_s = time.monotonic() - clock
    memory_exceeded = bool(states["subject"].get("OOMKilled"))
    if states["judge"].get("OOMKilled") and not memory_exceeded:
        raise PlatformError("the judge ran out of memory (JUDGE_EXTRA_MB too small for this exercise?)")
    out = subject_run.pump.streams
    return SandboxRun(
        # The init reports signal N as 128+N; the other backends report -N.
        exit_code=returncode(exit_code if exit_code is not None else states["judge"].get("ExitCode")),
        timed_out=timed_out,
        memory_exceeded=memory_exceeded,
        output_exceeded=subject_run.pump.exceeded,
        stdout=bytes(out[STDOUT].data),
        stderr=bytes(out[STDERR].data),
        output_truncated=out[STDOUT].truncated or out[STDERR].truncated,
        wall_s=wall_s,
        judge_stderr=bytes(judge_run.pump.streams[STDERR].data),
    )


def release(api: APIClient, started: dict[str, Attached], names: list[str]) -> None:
    """Stop reading the attached streams and force-remove the containers ``names``."""
    for run in started.values():
        run.pump.stop.set()
        run.pump.join(LINGER_S)
        with contextlib.suppress(OSError):
            run.attached.close()
    for name in names:
        _remove(api, name)


def _await_judge(api: APIClient, judge: Attached, subject_pump: _Pump, deadline: float) -> tuple[int | None, bool]:
    """Wait until the judge exits, the subject floods its output, or ``deadline``; return (exit code, timed out)."""
    while time.monotonic() < deadline and not judge.pump.done.is_set() and not subject_pump.exceeded:
        judge.pump.done.wait(POLL_S)
    if subject_pump.exceeded:
        return None, False
    if not judge.pump.done.is_set():
        return None, True
    # The judge's stream ended (it exited, or closed its output): its exit is still due by the deadline.
    try:
        return api.wait(judge.name, timeout=max(0.5, deadline - time.monotonic()))["StatusCode"], False
    except (requests.exceptions.Timeout, requests.exceptions.ConnectionError):  # how a read timeout shows
        return None, True


def _remove(api: APIClient, name: str) -> None:
    """Force-remove the container if it exists; a failure is logged and left to ``reap_stale``."""
    try:
        api.remove_container(name, force=True)
    except docker.errors.NotFound:
        pass
    except ENGINE_ERRORS as exc:
        log.warning("could not remove container %s (a later check() reaps it): %s", name, exc)


def reap_stale(api: APIClient, now: float | None = None) -> list[str]:
    """Remove gpulab containers whose ``gpulab.deadline`` passed more than ``REAP_GRACE_S`` ago."""
    now = time.time() if now is None else now
    removed = []
    for container in api.containers(all=True, filters={"label": LABEL_JOB}):
        try:
            deadline = float(container.get("Labels", {}).get(LABEL_DEADLINE, "0"))
        except ValueError:
            deadline = 0.0
        if deadline + REAP_GRACE_S < now:
            _remove(api, container["Id"])
            removed.append(container["Id"])
    return removed


class DockerSandbox:
    """Run the runner in a fresh, locked-down container of the grading image."""

    name = "docker"
    isolated = True

    def __init__(
        self,
        *,
        image: str = "gpulab/grader:cpu",
        url: str = "",
        api_timeout_s: float = 10.0,
        timeout_margin_s: float = 5.0,
        gpu_slots: GpuSlots | None = None,
    ) -> None:
        self.image = image
        self.url = url or os.environ.get("DOCKER_HOST") or DEFAULT_URL
        self.api_timeout_s = api_timeout_s
        self.timeout_margin_s = timeout_margin_s
        self.gpu_slots = gpu_slots

    @contextlib.contextmanager
    def _client(self) -> Iterator[APIClient]:
        """Yield an Engine API client whose every call gives up after ``api_timeout_s``."""
        try:
            api = APIClient(base_url=self.url, version=API_VERSION, timeout=self.api_timeout_s)
        except docker.errors.DockerException as exc:
            raise SandboxUnavailable(f"cannot use the docker engine at {self.url}: {exc}; {HINT}") from exc
        try:
            yield api
        finally:
            api.close()

    def _check(self, api: APIClient) -> str:
        """Raise ``SandboxUnavailable`` unless the engine and the matching image are there; return its id."""
        try:
            api.ping()
        except ENGINE_ERRORS as exc:
            raise SandboxUnavailable(f"no docker engine answers at {self.url} ({type(exc).__name__}); {HINT}") from exc
        try:
            image = api.inspect_image(self.image)
            labels = image.get("Config", {}).get("Labels") or {}
        except docker.errors.ImageNotFound:
            raise SandboxUnavailable(f"grading image {self.image} is missing: {HINT}") from None
        except ENGINE_ERRORS as exc:
            raise SandboxUnavailable(f"cannot inspect grading image {self.image}: {exc}; {HINT}") from exc
        if labels.get(LABEL_RUNNER) != runner_digest():
            raise SandboxUnavailable(
                f"grading image {self.image} holds another version of the runner "
                f"({labels.get(LABEL_RUNNER)!r}, this worker has {runner_digest()!r}): rebuild it (docker/build-image)"
            )
        with contextlib.suppress(*ENGINE_ERRORS):
            reap_stale(api)
        return str(image.get("Id", ""))

    def check(self) -> None:
        """Raise ``SandboxUnavailable`` unless the engine answers and the matching grading image is there."""
        with self._client() as api:
            self._check(api)

    def run(self, job_dir: Path, limits: Limits) -> SandboxRun:
        """Run the judge and the subject over ``job_dir`` in fresh containers; see the module contract."""
        job_dir = job_dir.resolve()
        for name in ("out", "ipc"):
            if os.geteuid() == 0:
                os.chown(job_dir / name, JUDGE_UID, JUDGE_UID)
            else:
                (job_dir / name).chmod(0o777)  # not root: the judge's uid can only be let in by mode
        with self._client() as api:
            image_id = self._check(api)
            lease: GpuLease | None = self.gpu_slots.acquire(GPU_WAIT_S) if self.gpu_slots else None
            try:
                return self._run(api, job_dir, limits, image_id=image_id, gpu_ids=lease.ids if lease else ())
            finally:
                if lease is not None:
                    lease.release()

    def _run(
        self, api: APIClient, job_dir: Path, limits: Limits, *, image_id: str, gpu_ids: tuple[str, ...]
    ) -> SandboxRun:
        """Run the job in two fresh containers (``WarmDockerSandbox`` first tries a pair started earlier)."""
        judge, subject = self.container_specs(job_dir, limits, gpu_ids)
        return run_job(
            api,
            judge,
            subject,
            timeout_s=self.wall_limit_s(limits),
            output_bytes=limits.output_bytes,
            hard_cap_bytes=hard_output_cap(limits),
        )

    def wall_limit_s(self, limits: Limits) -> float:
        """Return the outer clock of a run: the job's limit and the margin the runner's own clock needs."""
        return limits.timeout_s + self.timeout_margin_s

    def container_specs(
        self, job_dir: Path, limits: Limits, gpu_ids: tuple[str, ...] = ()
    ) -> tuple[ContainerSpec, ContainerSpec]:
        """Return the judge's and the subject's containers for ``job_dir``; only the subject gets GPUs."""
        job = uuid.uuid4().hex
        deadline = time.time() + limits.timeout_s + self.timeout_margin_s + 6 * self.api_timeout_s

        def spec(role: str, uid: int, gpus: tuple[str, ...]) -> ContainerSpec:
            limits_of_role = role_limits(role, limits)
            return ContainerSpec(
                image=self.image,
                argv=("python3", "-m", f"runner.{role}", JOB_MOUNT),
                binds=tuple(
                    Bind(job_dir / name, f"{JOB_MOUNT}/{name}", read_only=access == "ro")
                    for name, access in ROLE_MOUNTS[role]
                    if (job_dir / name).exists()
                ),
                env=sandbox_env(limits_of_role, SANDBOX_RUNNER_ROOT),
                limits=limits_of_role,
                labels={LABEL_JOB: job, LABEL_ROLE: role, LABEL_DEADLINE: str(int(deadline))},
                gpu_ids=gpus,
                user=f"{uid}:{uid}",
                name=f"gpulab-{job}-{role}",
            )

        return spec("judge", JUDGE_UID, ()), spec("subject", SUBJECT_UID, gpu_ids)
