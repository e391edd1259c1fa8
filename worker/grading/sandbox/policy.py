"""The per-role policy every backend applies (``base.py``'s table as numbers): one place, so backends agree.

Contract:
- subject (runs the learner's code): the exercise's ``Limits`` as they are: memory ``memory_mb``, ``pids``,
  ``cpus``, ``tmpfs_mb`` for ``/tmp`` and ``/dev/shm``, ``file_size_mb``.
- judge (trusted: pytest, the hidden tests, the result): the same, except memory ``memory_mb +
  JUDGE_EXTRA_MB`` and its own pids budget ``JUDGE_PIDS``. ``role_limits(role, limits)`` returns either.
- both: CPU-time rlimit ``cpu_rlimit_s(limits)`` (``timeout_s + 2`` soft, one more hard), ``OPEN_FILES``
  open files, no core dumps; the environment is exactly ``sandbox_env(limits, runner_root)`` (no host
  variable; thread pools sized to the CPU share); the runner (``RUNNER_DIR`` on the host) read-only at
  ``SANDBOX_RUNNER_ROOT/runner``; the job at ``JOB_MOUNT``, also the working directory; ``/tmp`` is
  ``SANDBOX_TMP`` and ``HOME``.
- output: each of the subject's streams is kept up to ``limits.output_bytes`` (truncated past it); past
  ``hard_output_cap(limits)`` bytes in all, the run is stopped (``output_exceeded``).
The ``unsafe`` backend applies the limits it can (rlimits, environment, output caps; see ``unsafe.py``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from worker.bank.specdata import Limits
from worker.grading.sandbox.base import ROLES

RUNNER_DIR = Path(__file__).resolve().parents[2] / "runner"
SANDBOX_RUNNER_ROOT = "/opt/gpulab"  # the grading image installs the runner here too (Dockerfile.gpu)
JOB_MOUNT = "/job"
SANDBOX_TMP = "/tmp"  # noqa: S108 - the sandbox's own private tmpfs, not the host's /tmp
HARD_OUTPUT_CAP = 8 * 1024 * 1024
OPEN_FILES = 1024
JUDGE_EXTRA_MB = 512
JUDGE_PIDS = 64
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMEXPR_NUM_THREADS")


def role_limits(role: str, limits: Limits) -> Limits:
    """Return the limits ``role`` runs under for an exercise whose limits are ``limits``."""
    if role == "judge":
        return dataclasses.replace(limits, memory_mb=limits.memory_mb + JUDGE_EXTRA_MB, pids=JUDGE_PIDS)
    if role == "subject":
        return limits
    raise ValueError(f"unknown role {role!r}; roles are {', '.join(ROLES)}")


def cpu_rlimit_s(limits: Limits) -> tuple[int, int]:
    """Return the CPU-time rlimit (soft, hard) in seconds: a little over ``timeout_s``, behind the wall clock."""
    soft_s = int(limits.timeout_s) + 2
    return soft_s, soft_s + 1


def sandbox_env(limits: Limits, pythonpath: str) -> dict[str, str]:
    """Return the whole environment the sandboxed program sees."""
    threads = str(max(1, int(limits.cpus)))
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": SANDBOX_TMP,
        "TMPDIR": SANDBOX_TMP,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "USER": "sandbox",
        "LOGNAME": "sandbox",
        "PYTHONPATH": pythonpath,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONSAFEPATH": "1",
    }
    env.update(dict.fromkeys(THREAD_VARS, threads))
    return env


def hard_output_cap(limits: Limits) -> int:
    """Return the total output past which a run is stopped rather than just truncated."""
    return max(HARD_OUTPUT_CAP, 64 * limits.output_bytes)
