"""The one protocol every sandbox backend implements, and what a run reports back.

Contract:
- ``Sandbox.run(job_dir, limits)`` runs ``python -m runner /job`` with ``job_dir`` mounted at ``/job``:
  ``/job/job.json``, ``/job/submission`` and ``/job/tests`` read-only, ``/job/out`` the only writable place
  that survives the run. It returns a ``SandboxRun`` and never raises for anything the learner's code did;
  it raises ``SandboxUnavailable`` when the backend cannot run here and ``PlatformError`` for our failures.
- The backend enforces the wall clock (``limits.timeout_s`` plus its own margin), memory, pids, CPU and
  output limits, and leaves no process, mount, cgroup or container behind.
- ``stdout``/``stderr`` are capped at ``limits.output_bytes`` each; ``output_truncated`` says if more came.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from worker.spec import Limits


@dataclass
class SandboxRun:
    exit_code: int | None
    timed_out: bool = False
    memory_exceeded: bool = False
    output_exceeded: bool = False
    stdout: bytes = b""
    stderr: bytes = b""
    output_truncated: bool = False
    wall_s: float = 0.0


class Sandbox(Protocol):
    name: str
    isolated: bool

    def check(self) -> None:
        """Raise ``SandboxUnavailable`` with a clear message if this backend cannot run here."""

    def run(self, job_dir: Path, limits: Limits) -> SandboxRun:
        """Run the runner over ``job_dir`` under ``limits`` and report what happened."""
        ...
