"""The ``unsafe`` backend: the runner as a plain child process, for dev and demo hosts only.

Contract: same as ``base.py`` except isolation: ``python -m runner JOB_DIR`` runs the judge, which starts
the subject as its own child over a socketpair; the learner's code runs as the worker's user with its
filesystem and network (it could read the hidden tests).
It still gets an empty environment (no ``GPULAB_*`` secrets) but ``PATH`` and the host variables named in
``pass_env`` (``scripts/gpu-check`` names the ones the GPU driver may be found by), the wall clock, the
output caps and, when ``prlimit`` exists, CPU/file-size/core rlimits. Memory and pids are not limited.
The job directory is passed by its real path instead of being mounted at ``/job``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from worker.bank.specdata import Limits
from worker.grading.sandbox.base import SandboxRun
from worker.grading.sandbox.policy import RUNNER_DIR, cpu_rlimit_s, hard_output_cap, sandbox_env
from worker.grading.sandbox.process import run_process


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the child's whole session (it was started as a session leader)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


class UnsafeSandbox:
    """Run the runner without isolation; labelled on every result."""

    name = "unsafe"
    isolated = False

    def __init__(self, *, timeout_margin_s: float = 5.0, pass_env: tuple[str, ...] = ()) -> None:
        self.timeout_margin_s = timeout_margin_s
        self.pass_env = pass_env

    def check(self) -> None:
        """Nothing to check: a Python that can run pytest is all this backend needs."""

    def run(self, job_dir: Path, limits: Limits) -> SandboxRun:
        """Run the runner over ``job_dir`` as a plain subprocess."""
        job_dir = job_dir.resolve()
        argv = [sys.executable, "-m", "runner", str(job_dir)]
        prlimit = shutil.which("prlimit")
        if prlimit:
            cpu_soft_s, cpu_hard_s = cpu_rlimit_s(limits)
            fsize = limits.file_size_mb * 1024 * 1024
            argv = [prlimit, f"--cpu={cpu_soft_s}:{cpu_hard_s}", f"--fsize={fsize}", "--core=0", "--", *argv]
        env = sandbox_env(limits, str(RUNNER_DIR.parent))
        env["PATH"] = os.environ.get("PATH", env["PATH"])
        env.update({name: os.environ[name] for name in self.pass_env if name in os.environ})
        result = run_process(
            argv,
            timeout_s=limits.timeout_s + self.timeout_margin_s,
            output_bytes=limits.output_bytes,
            hard_cap_bytes=hard_output_cap(limits),
            kill=_kill_group,
            env=env,
            cwd=str(job_dir),
        )
        return SandboxRun(
            exit_code=result.exit_code,
            timed_out=result.timed_out,
            output_exceeded=result.output_exceeded,
            stdout=result.stdout,
            stderr=result.stderr,
            output_truncated=result.output_truncated,
            wall_s=result.wall_s,
        )
