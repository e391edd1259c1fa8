"""The judge: the trusted side, which runs the hidden tests and alone writes ``out/result.json``.

Contract (details in ``README.md``):
- ``python -m runner.judge JOB_DIR`` reads ``JOB_DIR/job.json``, listens on ``JOB_DIR/ipc/judge.sock``
  for the subject (started separately by the sandbox backend), runs pytest over ``JOB_DIR/tests`` and
  writes ``JOB_DIR/out/result.json`` once, atomically, and exits 0.
- ``python -m runner JOB_DIR`` is the same judge, but it starts the subject itself as a child process
  over a socketpair: for the ``unsafe`` backend and for tests of the runner, never for isolation.
- If the judge itself cannot work (bad job.json, unwritable out/), it exits non-zero without a result;
  the host then reports ``crashed``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from . import JOB_VERSION, RESULT_VERSION
from .client import ACCEPT_WAIT_S, SubjectClient, listen
from .plugin import LEARNER_PROCESS_MODES, Job, run_tests

EXIT_BAD_JOB = 2
EXIT_NO_RESULT = 3
MAX_REPLY_LIMIT = 64 * 1024 * 1024


def read_job(job_dir: Path) -> Job:
    """Read and check ``job.json``; raise ``ValueError`` on anything unexpected."""
    data = json.loads((job_dir / "job.json").read_text(encoding="utf-8"))
    if not isinstance(data, dict) or data.get("version") != JOB_VERSION:
        raise ValueError("job.json has an unsupported version")
    timeout_s = data.get("timeout_s")
    module = data.get("module", "submission")
    tests = data.get("tests", [])
    max_reply = data.get("max_reply_bytes", 4 * 1024 * 1024)
    learner_process = data.get("learner_process", "per-test")
    params = data.get("params", {})
    accept_wait_s = data.get("accept_wait_s", ACCEPT_WAIT_S)
    if not isinstance(accept_wait_s, int | float) or isinstance(accept_wait_s, bool) or not 0 < accept_wait_s <= 600:
        raise ValueError("job.json accept_wait_s must be a number of seconds in (0, 600]")
    if not isinstance(timeout_s, int | float) or isinstance(timeout_s, bool) or timeout_s <= 0:
        raise ValueError("job.json timeout_s must be a positive number")
    if not isinstance(module, str) or not module.isidentifier():
        raise ValueError("job.json module must be a Python identifier")
    if not isinstance(tests, list) or not all(isinstance(t, dict) and isinstance(t.get("id"), str) for t in tests):
        raise ValueError("job.json tests must be a list of {id, points}")
    if type(max_reply) is not int or not 0 < max_reply <= MAX_REPLY_LIMIT:
        raise ValueError("job.json max_reply_bytes must be a positive integer")
    if learner_process not in LEARNER_PROCESS_MODES:
        raise ValueError(f"job.json learner_process must be one of {', '.join(LEARNER_PROCESS_MODES)}")
    if not isinstance(params, dict) or not all(
        isinstance(k, str) and type(v) in (int, float, str) for k, v in params.items()
    ):
        raise ValueError("job.json params must map names to numbers or strings")
    return Job(
        job_dir=job_dir,
        timeout_s=float(timeout_s),
        module=module,
        expected=[t["id"] for t in tests],
        max_reply_bytes=max_reply,
        accept_wait_s=float(accept_wait_s),
        learner_process=learner_process,
        params=params,
    )


def write_result(out_dir: Path, result: dict[str, object]) -> None:
    """Write ``result.json`` atomically so the host never reads half a file."""
    tmp = out_dir / ".result.json.tmp"
    tmp.write_text(json.dumps(result), encoding="utf-8")
    os.replace(tmp, out_dir / "result.json")


def _spawn_subject(job_dir: Path) -> tuple[socket.socket, subprocess.Popen[bytes]]:
    """Start the subject as our child over a socketpair (development only: no isolation at all)."""
    mine, theirs = socket.socketpair()
    worker_dir = str(Path(__file__).resolve().parent.parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = worker_dir
    proc = subprocess.Popen(
        [sys.executable, "-m", "runner.subject", "--fd", str(theirs.fileno()), str(job_dir)],
        pass_fds=[theirs.fileno()],
        cwd=str(job_dir),
        env=env,
        start_new_session=True,
    )
    theirs.close()
    return mine, proc


def _kill_session(sid: int) -> None:
    """Kill every process of session ``sid``: the subject and its per-test children (own process groups)."""
    for _ in range(3):  # a child may fork while we look; a few passes catch its offspring too
        found = False
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 4 and int(fields[3]) == sid:
                found = True
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(stat.parent.name), signal.SIGKILL)
        if not found:
            return


def main(argv: list[str], *, spawn_subject: bool = False) -> int:
    """Judge one job; return the process exit code."""
    job_dir = Path(argv[1] if len(argv) > 1 else "/job")
    try:
        job = read_job(job_dir)
    except (OSError, ValueError) as exc:
        print(f"gpulab runner: cannot read job.json: {exc}", file=sys.stderr)
        return EXIT_BAD_JOB
    deadline = time.monotonic() + job.timeout_s
    subject: subprocess.Popen[bytes] | None = None
    if spawn_subject:
        sock, subject = _spawn_subject(job_dir)
        client = SubjectClient(deadline=deadline, max_reply_bytes=job.max_reply_bytes, sock=sock)
    else:
        listener = listen(job_dir / "ipc" / "judge.sock")
        client = SubjectClient(
            deadline=deadline, max_reply_bytes=job.max_reply_bytes, listener=listener, accept_wait_s=job.accept_wait_s
        )
    try:
        tests, error, timed_out, measurements, platform_error = run_tests(job, client)
    finally:
        if subject is not None:
            # Closing our end makes the subject stop its current child; then the subject itself goes.
            client.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                subject.wait(timeout=1)
            _kill_session(subject.pid)
            subject.wait()
    result: dict[str, object] = {"version": RESULT_VERSION, "tests": tests, "error": error}
    if timed_out:
        result["timed_out"] = True
    if measurements:
        result["measurements"] = measurements
    if platform_error:
        result["platform_error"] = platform_error
    try:
        write_result(job_dir / "out", result)
    except OSError as exc:
        print(f"gpulab runner: cannot write result.json: {exc}", file=sys.stderr)
        return EXIT_NO_RESULT
    return 0


def run(spawn_subject: bool) -> None:
    """Run ``main`` as a program and leave without running anyone's atexit hooks."""
    code = main(sys.argv, spawn_subject=spawn_subject)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run(spawn_subject=False)
