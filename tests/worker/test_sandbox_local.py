"""The local backend for real: bubblewrap, the sandbox user, rlimits and cgroups on this host."""

from __future__ import annotations

import json
import pwd
import socket
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from worker.bank.spec import ExerciseSpec
from worker.grading.jobdir import read_result, write_job_dir
from worker.grading.sandbox.base import SandboxRun
from worker.grading.sandbox.local import LocalSandbox

Leftovers = Callable[[int], tuple[list[str], list[str]]]


@pytest.fixture(autouse=True)
def nothing_left_behind(sandbox_user: pwd.struct_passwd, leftovers: Leftovers) -> Iterator[None]:
    """After every run: no job cgroup and no live process of the sandbox user may remain."""
    yield
    groups, live = leftovers(sandbox_user.pw_uid)
    assert groups == [], f"cgroups left behind: {groups}"
    assert live == [], f"processes left behind: {live}"


def run_probe(
    sandbox: LocalSandbox, tmp_path: Path, spec: ExerciseSpec, code: str
) -> tuple[SandboxRun, dict[str, Any] | None]:
    """Run ``code`` as the submission of ``spec``; return the run and the runner's result."""
    job = write_job_dir(tmp_path / "job", spec=spec, code=textwrap.dedent(code))
    run = sandbox.run(job, spec.limits)
    return run, read_result(job / "out")


def probe_spec(tiny_spec: Callable[..., ExerciseSpec], **limits: float) -> ExerciseSpec:
    return tiny_spec(**{"timeout_s": 5, "memory_mb": 256, **limits})


def probe_output(run: SandboxRun) -> dict[str, Any]:
    """Parse the single JSON line a probe submission prints."""
    lines = [line for line in run.stdout.decode().splitlines() if line.startswith("{")]
    assert lines, (run.stdout, run.stderr)
    return json.loads(lines[-1])


def test_passing_exercise(local_sandbox: LocalSandbox, tmp_path: Path, tiny_spec: Callable[..., ExerciseSpec]) -> None:
    run, result = run_probe(local_sandbox, tmp_path, probe_spec(tiny_spec), "def add(a, b):\n    return a + b\n")
    assert run.exit_code == 0, run.stderr
    assert not (run.timed_out or run.memory_exceeded or run.output_exceeded)
    assert result is not None
    assert [t["outcome"] for t in result["tests"]] == ["passed", "passed"]
    assert run.wall_s < 2


def test_identity_environment_and_network(
    local_sandbox: LocalSandbox,
    tmp_path: Path,
    tiny_spec: Callable[..., ExerciseSpec],
    sandbox_user: pwd.struct_passwd,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GPULAB_SECRET_KEY", "host-secret-that-must-not-leak-0123456789")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    code = f"""
        import json, os, socket

        def reach(host, port):
            try:
                socket.create_connection((host, port), timeout=1).close()
                return True
            except OSError:
                return False

        print(json.dumps({{
            "uid": os.getuid(), "gid": os.getgid(), "euid": os.geteuid(), "groups": os.getgroups(),
            "environ": dict(os.environ),
            "pid1_environ": open("/proc/1/environ", "rb").read().decode(errors="replace"),
            "host_listener": reach("127.0.0.1", {port}),
            "redis": reach("127.0.0.1", 6379),
            "outside": reach("1.1.1.1", 80),
        }}))

        def add(a, b):
            return a + b
    """
    try:
        run, result = run_probe(local_sandbox, tmp_path, probe_spec(tiny_spec), code)
    finally:
        listener.close()
    seen = probe_output(run)
    assert seen["uid"] == seen["euid"] == sandbox_user.pw_uid != 0
    assert seen["gid"] == sandbox_user.pw_gid != 0
    assert 0 not in seen["groups"]
    assert not any(key.startswith("GPULAB") for key in seen["environ"])
    assert "GPULAB" not in seen["pid1_environ"] and "host-secret" not in seen["pid1_environ"]
    assert set(seen["environ"]) <= {
        "PATH", "PWD", "HOME", "TMPDIR", "LANG", "LC_ALL", "USER", "LOGNAME", "PYTHONPATH", "PYTHONDONTWRITEBYTECODE",
        "PYTHONUNBUFFERED", "PYTHONNOUSERSITE", "PYTHONSAFEPATH", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD",
    }  # fmt: skip
    assert seen["host_listener"] is False, "the host's loopback must not be reachable"
    assert seen["redis"] is False and seen["outside"] is False
    assert result is not None


def test_only_out_and_tmp_are_writable(
    local_sandbox: LocalSandbox, tmp_path: Path, tiny_spec: Callable[..., ExerciseSpec]
) -> None:
    venv_file = Path(__import__("sys").prefix) / "gpulab-sandbox-probe"
    code = f"""
        import json

        def try_write(path):
            try:
                with open(path, "w") as handle:
                    handle.write("x")
                return True
            except OSError:
                return False

        paths = ["/job/out/probe", "/job/ipc/probe", "/job/probes/probe",
                 "/tmp/probe", "/dev/shm/probe", "/job/probe", "/job/tests/probe",
                 "/job/submission/probe", "/job/job.json", "/etc/probe", "/usr/probe", "/probe",
                 "/opt/gpulab/runner/probe", {str(venv_file)!r}, {str(tmp_path / "escaped")!r}]
        print(json.dumps({{p: try_write(p) for p in paths}}))

        def add(a, b):
            return a + b
    """
    run, _ = run_probe(local_sandbox, tmp_path, probe_spec(tiny_spec), code)
    wrote = probe_output(run)
    # The learner's process may write its own /tmp and /dev/shm only; /job/out is the judge's.
    assert {p for p, ok in wrote.items() if ok} == {"/tmp/probe", "/dev/shm/probe"}
    assert not venv_file.exists() and not (tmp_path / "escaped").exists()


def test_memory_bomb_is_killed_and_reported(
    local_sandbox: LocalSandbox, tmp_path: Path, tiny_spec: Callable[..., ExerciseSpec]
) -> None:
    code = """
        hog = []
        while True:
            hog.append(bytearray(16 * 1024 * 1024))
    """
    run, result = run_probe(local_sandbox, tmp_path, probe_spec(tiny_spec, memory_mb=128), code)
    assert run.memory_exceeded is True
    assert not run.timed_out
    assert result is not None, "the judge lives in its own cgroup and still reports"
    assert all(t["outcome"] == "failed" and "SIGKILL" in t["message"] for t in result["tests"]), result


def test_fork_bomb_is_bounded_by_pids(
    local_sandbox: LocalSandbox, tmp_path: Path, tiny_spec: Callable[..., ExerciseSpec]
) -> None:
    code = """
        import json, os, time
        started = 0
        for _ in range(200):
            try:
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                started += 1
            except OSError:
                pass
        print(json.dumps({"started": started}))

        def add(a, b):
            return a + b
    """
    run, _ = run_probe(local_sandbox, tmp_path, probe_spec(tiny_spec, pids=16, timeout_s=3), code)
    assert probe_output(run)["started"] < 16


@pytest.mark.slow
def test_endless_sleep_times_out(
    local_sandbox: LocalSandbox, tmp_path: Path, tiny_spec: Callable[..., ExerciseSpec]
) -> None:
    # The learner's process ignores every timer; the judge's own deadline ends the test.
    code = """
        import signal, time
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        time.sleep(3600)
    """
    spec = probe_spec(tiny_spec, timeout_s=1)
    run, result = run_probe(local_sandbox, tmp_path, spec, code)
    assert result is not None and result.get("timed_out") is True
    assert run.wall_s < spec.limits.timeout_s + 2


def test_huge_output_is_truncated_and_stopped(
    local_sandbox: LocalSandbox, tmp_path: Path, tiny_spec: Callable[..., ExerciseSpec]
) -> None:
    code = """
        import sys
        while True:
            sys.stdout.write("x" * 65536)
    """
    spec = probe_spec(tiny_spec, output_bytes=4096)
    run, _ = run_probe(local_sandbox, tmp_path, spec, code)
    assert run.output_exceeded is True and run.output_truncated is True
    assert len(run.stdout) == 4096
    assert not run.timed_out


def test_modest_output_is_only_truncated(
    local_sandbox: LocalSandbox, tmp_path: Path, tiny_spec: Callable[..., ExerciseSpec]
) -> None:
    code = """
        print("y" * 100_000)

        def add(a, b):
            return a + b
    """
    run, result = run_probe(local_sandbox, tmp_path, probe_spec(tiny_spec, output_bytes=4096), code)
    assert run.output_truncated is True and run.output_exceeded is False
    assert run.stdout == b"y" * 4096
    assert result is not None and [t["outcome"] for t in result["tests"]] == ["passed", "passed"]
