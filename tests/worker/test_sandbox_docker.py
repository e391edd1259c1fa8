"""The docker backend: real engine and image for isolation and limits, fakes for hung daemons and GPUs.

Tests marked ``docker`` need ``scripts/dockerd`` and ``docker/build-image``; without them they skip, unless
``GPULAB_REQUIRE_DOCKER=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.worker.conftest import tiny_add_files
from worker.bank.spec import ExerciseSpec
from worker.core.config import Settings
from worker.core.errors import PlatformError, SandboxUnavailable
from worker.core.outcome import GradeOutcome, Verdict
from worker.grading.jobdir import write_job_dir
from worker.grading.pipeline import grade
from worker.grading.sandbox import get_sandbox
from worker.grading.sandbox.docker import (
    API_VERSION,
    GPU_SHM_MB,
    JUDGE_UID,
    LABEL_DEADLINE,
    LABEL_JOB,
    SUBJECT_UID,
    APIClient,
    DockerSandbox,
    create_args,
    host_config_args,
    reap_stale,
    run_job,
)
from worker.grading.sandbox.gpus import GpuSlots, parse_gpu_ids
from worker.grading.sandbox.seccomp import docker_profile

MARGIN_S = 2.0
CORRECT = "def add(a, b):\n    return a + b\n"


def _unavailable(reason: str) -> None:
    if os.environ.get("GPULAB_REQUIRE_DOCKER") == "1":
        pytest.fail(f"GPULAB_REQUIRE_DOCKER=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_sandbox() -> DockerSandbox:
    """The docker backend on the local engine and image; skipped (or failed in CI) when either is missing."""
    sandbox = DockerSandbox(timeout_margin_s=MARGIN_S, api_timeout_s=15)
    try:
        sandbox.check()
    except SandboxUnavailable as exc:
        _unavailable(f"the docker sandbox cannot run here: {exc}")
    return sandbox


def _job_containers() -> list[str]:
    api = APIClient(version=API_VERSION, timeout=15)
    try:
        return [c["Names"][0] for c in api.containers(all=True, filters={"label": LABEL_JOB})]
    finally:
        api.close()


@pytest.fixture
def engine(docker_sandbox: DockerSandbox) -> Iterator[DockerSandbox]:
    """The sandbox, and a check that the test left no gpulab container behind."""
    yield docker_sandbox
    assert _job_containers() == []


def _grade(sandbox: DockerSandbox, code: str, **limits: float) -> GradeOutcome:
    spec = ExerciseSpec.from_files("tiny-add", tiny_add_files(**limits))
    return grade(spec, code, sandbox=sandbox)


@pytest.mark.docker
@pytest.mark.slow
def test_correct_submission_passes(engine: DockerSandbox) -> None:
    outcome = _grade(engine, CORRECT)
    assert outcome.verdict is Verdict.passed, outcome
    assert outcome.score == outcome.max_score == 3
    assert outcome.sandbox == "docker"


@pytest.mark.docker
@pytest.mark.slow
def test_wrong_submission_fails_with_the_tests_message(engine: DockerSandbox) -> None:
    outcome = _grade(engine, "def add(a, b):\n    return a - b\n")
    assert outcome.verdict is Verdict.failed
    assert outcome.score == 0
    assert "add(1, 2) should be 3" in outcome.tests[0].message


@pytest.mark.docker
@pytest.mark.slow
def test_endless_loop_is_a_timeout_within_the_limit(engine: DockerSandbox) -> None:
    started = time.monotonic()
    outcome = _grade(engine, "def add(a, b):\n    while True:\n        pass\n", timeout_s=3)
    assert outcome.verdict is Verdict.timeout
    assert time.monotonic() - started < 3 + MARGIN_S + 5


@pytest.mark.docker
@pytest.mark.slow
def test_hung_judge_is_killed_and_removed_by_the_wall_clock(engine: DockerSandbox, tmp_path: Path) -> None:
    # A judge that never ends: only the backend's own clock can stop it.
    spec = ExerciseSpec.from_files("tiny-add", tiny_add_files(timeout_s=2))
    job = write_job_dir(tmp_path / "job", spec=spec, code=CORRECT)
    judge, subject = engine.container_specs(job, spec.limits)
    judge = dataclasses.replace(judge, argv=("python3", "-c", "import time; time.sleep(600)"))
    api = APIClient(version=API_VERSION, timeout=15)
    try:
        started = time.monotonic()
        run = run_job(api, judge, subject, timeout_s=2 + MARGIN_S, output_bytes=4096, hard_cap_bytes=1 << 20)
        elapsed = time.monotonic() - started
    finally:
        api.close()
    assert run.timed_out
    assert elapsed < 2 + MARGIN_S + 5, elapsed


@pytest.mark.docker
@pytest.mark.slow
def test_memory_bomb_is_a_memory_limit(engine: DockerSandbox) -> None:
    code = CORRECT + "\nhog = b'x' * (400 * 1024 * 1024)\n"
    outcome = _grade(engine, code, memory_mb=128, timeout_s=20)
    assert outcome.verdict is Verdict.memory_limit, outcome


@pytest.mark.docker
@pytest.mark.slow
def test_output_flood_is_stopped(engine: DockerSandbox) -> None:
    code = CORRECT + "\nimport sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"
    outcome = _grade(engine, code, timeout_s=20)
    assert outcome.verdict is Verdict.crashed
    assert "too much output" in outcome.message
    assert len(outcome.stdout) < 200_000


PROBES = CORRECT + textwrap.dedent(
    """
    import os, socket
    try:
        socket.create_connection(("127.0.0.1", 6379), timeout=2).close()
        print("NET connected")
    except OSError as exc:
        print("NET refused", type(exc).__name__)
    print("IFACES", ",".join(sorted(os.listdir("/sys/class/net"))))
    print("IDS", os.getuid(), os.getgid())
    try:
        open("/usr/gpulab-probe", "w").close()
        print("USR writable")
    except OSError as exc:
        print("USR refused", exc.errno)
    print("SEES", ",".join(sorted(os.listdir("/job"))))
    print("DOCKER_SOCK", os.path.exists("/var/run/docker.sock"))
    print("CAPS", [l.split()[1] for l in open("/proc/self/status") if l.startswith("CapEff")][0])
    print("NNP", [l.split()[1] for l in open("/proc/self/status") if l.startswith("NoNewPrivs")][0])
    print("SECCOMP", [l.split()[1] for l in open("/proc/self/status") if l.startswith("Seccomp:")][0])
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    print("PTRACE", libc.ptrace(16, os.getppid(), 0, 0), ctypes.get_errno())  # PTRACE_ATTACH to the relay

    def errno_of(result):
        return 0 if result >= 0 else ctypes.get_errno()

    # unshare(CLONE_NEWUSER), clone3 (435 on both architectures), personality(ADDR_NO_RANDOMIZE), the query
    print("RULES", errno_of(libc.unshare(0x10000000)), errno_of(libc.syscall(435, None, 0)),
          errno_of(libc.personality(ctypes.c_ulong(0x0040000))), errno_of(libc.personality(ctypes.c_ulong(0xFFFFFFFF))))
    """
)


@pytest.mark.docker
@pytest.mark.slow
def test_learner_code_is_isolated(engine: DockerSandbox) -> None:
    outcome = _grade(engine, PROBES)
    lines = dict(line.split(" ", 1) for line in outcome.stdout.splitlines() if " " in line)
    assert outcome.verdict is Verdict.passed, outcome
    assert lines["NET"].startswith("refused"), lines  # Redis listens on the host's 127.0.0.1:6379
    assert lines["IFACES"] == "lo"
    assert lines["IDS"] == f"{SUBJECT_UID} {SUBJECT_UID}"
    assert lines["USR"].startswith("refused")
    # The subject sees its own mounts only: no hidden tests, no result file, no docker socket.
    assert lines["SEES"] == "ipc,probes,subject.json,submission"
    assert lines["DOCKER_SOCK"] == "False"
    assert int(lines["CAPS"], 16) == 0
    assert lines["NNP"] == "1"
    assert lines["SECCOMP"] == "2"
    assert lines["PTRACE"] == "-1 1"  # EPERM
    assert lines["RULES"] == "1 38 1 0"  # the local backend's errnos (seccomp.RULES)


@pytest.mark.docker
def test_check_refuses_a_missing_image(docker_sandbox: DockerSandbox) -> None:
    sandbox = DockerSandbox(image="gpulab/no-such-image:never", api_timeout_s=15)
    with pytest.raises(SandboxUnavailable, match="docker/build-image"):
        sandbox.check()


def test_get_sandbox_builds_the_docker_backend_from_settings(tmp_path: Path) -> None:
    settings = Settings(sandbox="docker", docker_image="img:1", docker_api_timeout_s=3, gpu_ids="0,1",
                        gpus_per_job=2, data_dir=tmp_path)  # fmt: skip
    sandbox = get_sandbox(settings)
    assert isinstance(sandbox, DockerSandbox)
    assert (sandbox.image, sandbox.api_timeout_s) == ("img:1", 3)
    assert sandbox.gpu_slots is not None and sandbox.gpu_slots.ids == ("0", "1")
    assert isinstance(get_sandbox(Settings(sandbox="docker")), DockerSandbox)


# --- a daemon that accepts connections and never answers ------------------------------------------------


@pytest.fixture
def hung_daemon(tmp_path: Path) -> Iterator[str]:
    """Return the URL of a Unix socket that accepts every connection and never says a word."""
    path = tmp_path / "hung.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"unix://{path}"
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    server.close()


def test_check_gives_up_on_a_hung_daemon(hung_daemon: str) -> None:
    sandbox = DockerSandbox(url=hung_daemon, api_timeout_s=1)
    started = time.monotonic()
    with pytest.raises(SandboxUnavailable, match="scripts/dockerd"):
        sandbox.check()
    assert time.monotonic() - started < 3


def test_run_gives_up_on_a_hung_daemon(hung_daemon: str, tmp_path: Path) -> None:
    spec = ExerciseSpec.from_files("tiny-add", tiny_add_files(timeout_s=30))
    job = write_job_dir(tmp_path / "job", spec=spec, code=CORRECT)
    sandbox = DockerSandbox(url=hung_daemon, api_timeout_s=1)
    judge, subject = sandbox.container_specs(job, spec.limits)
    api = APIClient(base_url=hung_daemon, version=API_VERSION, timeout=1)
    # Past create (1 s) and the removal of whatever it may have made (1 s per container): never the job's 30 s
    # limit. The bound is the limit's, not a speed target: a loaded 2-core machine may take several seconds.
    started = time.monotonic()
    with pytest.raises(PlatformError, match="docker engine"):
        run_job(api, judge, subject, timeout_s=30, output_bytes=4096, hard_cap_bytes=1 << 20)
    assert time.monotonic() - started < 20
    started = time.monotonic()
    with pytest.raises(SandboxUnavailable):
        sandbox.run(job, spec.limits)
    assert time.monotonic() - started < 20


# --- container configuration, no engine needed -----------------------------------------------------------


def _specs(tmp_path: Path, gpu_ids: tuple[str, ...] = ()) -> tuple[Any, Any]:
    spec = ExerciseSpec.from_files("tiny-add", tiny_add_files(timeout_s=10, memory_mb=300))
    job = write_job_dir(tmp_path / "job", spec=spec, code=CORRECT)
    return DockerSandbox(image="img").container_specs(job, spec.limits, gpu_ids)


def test_both_roles_are_locked_down(tmp_path: Path) -> None:
    judge, subject = _specs(tmp_path)
    for role in (judge, subject):
        host = host_config_args(role)
        assert host["network_mode"] == "none" and host["read_only"] and host["init"]
        assert host["cap_drop"] == ["ALL"] and host["security_opt"][0] == "no-new-privileges"
        assert host["security_opt"][1] == f"seccomp={docker_profile()}"  # tests/worker/test_seccomp.py reads it
        assert host["privileged"] is False and host["ipc_mode"] == "private"
        assert host["mem_limit"] == host["memswap_limit"]
        assert host["log_config"].type == "none"
        assert "device_requests" not in host
        assert create_args(role)["network_disabled"] is True
    assert host_config_args(subject)["mem_limit"] == 300 * 1024 * 1024
    assert host_config_args(judge)["mem_limit"] == (300 + 512) * 1024 * 1024
    assert (judge.user, subject.user) == (f"{JUDGE_UID}:{JUDGE_UID}", f"{SUBJECT_UID}:{SUBJECT_UID}")
    assert judge.argv[-2:] == ("runner.judge", "/job") and subject.argv[-2:] == ("runner.subject", "/job")
    judge_binds = {b.target: b.read_only for b in judge.binds}
    subject_binds = {b.target: b.read_only for b in subject.binds}
    assert judge_binds == {"/job/job.json": True, "/job/tests": True, "/job/probes": True,
                           "/job/out": False, "/job/ipc": False}  # fmt: skip
    assert subject_binds == {"/job/subject.json": True, "/job/submission": True, "/job/probes": True,
                             "/job/ipc": True}  # fmt: skip
    assert judge.labels[LABEL_JOB] == subject.labels[LABEL_JOB]
    assert float(judge.labels[LABEL_DEADLINE]) > time.time()
    assert judge.env == subject.env and not any(key.startswith(("GPULAB", "DOCKER")) for key in judge.env)


def test_gpu_jobs_request_exactly_their_gpus(tmp_path: Path) -> None:
    judge, subject = _specs(tmp_path, ("2", "3"))
    host = host_config_args(subject)
    (request,) = host["device_requests"]
    assert request["Driver"] == "nvidia"
    assert request["DeviceIDs"] == ["2", "3"]
    assert request["Capabilities"] == [["gpu"]]
    assert request["Count"] == 0  # never -1, which would mean every GPU of the host
    assert int(host["shm_size"].rstrip("m")) >= GPU_SHM_MB
    assert create_args(subject)["environment"]["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert "device_requests" not in host_config_args(judge)


def test_reap_removes_only_containers_past_their_deadline() -> None:
    now = 1_000_000.0
    containers = [
        {"Id": "old", "Labels": {LABEL_JOB: "a", LABEL_DEADLINE: str(int(now - 3600))}},
        {"Id": "running", "Labels": {LABEL_JOB: "b", LABEL_DEADLINE: str(int(now + 30))}},
        {"Id": "garbled", "Labels": {LABEL_JOB: "c", LABEL_DEADLINE: "soon"}},
    ]
    removed: list[str] = []

    class FakeApi:
        def containers(self, **_: Any) -> list[dict[str, Any]]:
            return containers

        def remove_container(self, name: str, force: bool = False) -> None:
            removed.append(name)

    assert reap_stale(FakeApi(), now=now) == ["old", "garbled"]  # type: ignore[arg-type]
    assert removed == ["old", "garbled"]


# --- the GPU allocator ----------------------------------------------------------------------------------


def test_parse_gpu_ids() -> None:
    assert parse_gpu_ids("0, 1,2 ,3") == ("0", "1", "2", "3")
    assert parse_gpu_ids("") == ()
    assert parse_gpu_ids("GPU-8f3c1e2a-1b2c-4d5e-9f00-112233445566") == ("GPU-8f3c1e2a-1b2c-4d5e-9f00-112233445566",)
    with pytest.raises(SandboxUnavailable):
        parse_gpu_ids("0,0")
    with pytest.raises(SandboxUnavailable):
        parse_gpu_ids("0,../etc")


def test_leases_never_share_a_gpu(tmp_path: Path) -> None:
    slots = GpuSlots(("0", "1", "2", "3"), 2, tmp_path)
    first = slots.acquire(1)
    second = slots.acquire(1)
    assert set(first.ids).isdisjoint(second.ids) and len(first.ids) == len(second.ids) == 2
    assert slots.try_acquire() is None
    with pytest.raises(PlatformError, match="no 2 free GPU"):
        slots.acquire(0.3)
    first.release()
    with slots.acquire(1) as third:
        assert set(third.ids) == set(first.ids)
    second.release()


def test_a_lease_waits_for_a_gpu_to_free_up(tmp_path: Path) -> None:
    slots = GpuSlots(("0",), 1, tmp_path)
    held = slots.acquire(1)
    threading.Timer(0.3, held.release).start()
    started = time.monotonic()
    with slots.acquire(5) as lease:
        assert lease.ids == ("0",)
    assert 0.2 < time.monotonic() - started < 3


def test_another_process_holding_a_gpu_keeps_it(tmp_path: Path) -> None:
    script = (
        "import sys, time; from pathlib import Path; from worker.grading.sandbox.gpus import GpuSlots; "
        f"lease = GpuSlots(('0', '1'), 1, Path({str(tmp_path)!r})).acquire(1); "
        "print(lease.ids[0], flush=True); time.sleep(30)"
    )
    holder = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        taken = holder.stdout.readline().strip()
        with GpuSlots(("0", "1"), 1, tmp_path).acquire(1) as lease:
            assert lease.ids != (taken,)
    finally:
        holder.kill()
        holder.wait()
    # The holder died without releasing: the kernel dropped its lock.
    with GpuSlots(("0", "1"), 2, tmp_path).acquire(1) as both:
        assert set(both.ids) == {"0", "1"}


def test_more_gpus_per_job_than_the_host_has_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailable, match="GPULAB_GPUS_PER_JOB"):
        GpuSlots(("0",), 2, tmp_path)
    with pytest.raises(SandboxUnavailable, match="GPULAB_GPU_IDS"):
        GpuSlots((), 1, tmp_path)
