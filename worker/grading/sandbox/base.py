"""The one protocol every sandbox backend implements, and what a run reports back.

Backend contract (``local`` implements it with bubblewrap; ``docker`` must implement the same):

1. ``Sandbox.run(job_dir, limits)`` gets a job directory written by ``worker/grading/jobdir.py``::

       job.json  tests/  out/        judge only
       subject.json  submission/     subject only
       probes/  ipc/                 both

   It starts **two** sandboxed processes from the same Python and runner, which must not share a pid
   namespace, a uid, or anything writable other than ``ipc/``:

   ============  ==========================================  =========================================
   role          judge (trusted)                             subject (runs the learner's code)
   ============  ==========================================  =========================================
   argv          ``python -m runner.judge /job``             ``python -m runner.subject /job``
   cwd           ``/job``                                    ``/job``
   mounts        ``ROLE_MOUNTS["judge"]`` at ``/job/<name>``  ``ROLE_MOUNTS["subject"]`` at ``/job/<name>``
   runner        ``worker/runner`` read-only at ``/opt/gpulab/runner`` in both
   env           exactly ``worker.grading.sandbox.policy.sandbox_env(limits, "/opt/gpulab")`` (no host variables)
   uid           ``gpulab-judge`` (owns ``out/`` and ``ipc/``)  ``gpulab-sandbox``; never root, no caps
   limits        memory ``memory_mb + 512``, pids 64, CPU      memory ``memory_mb``, ``pids``, ``cpus``,
                 ``cpus``                                    ``tmpfs_mb`` for /tmp and /dev/shm,
                                                             ``file_size_mb``, CPU rlimit
                                                             ``timeout_s + 2``
   network       none (loopback at most)                     none (loopback at most); no host sockets
   ============  ==========================================  =========================================

   The root filesystem is read-only in both; ``/tmp`` and ``/dev/shm`` are private, size-capped tmpfs.
   Nothing else of the host (``/var/run/docker.sock``, the data dir, other jobs, ``/proc`` of the host)
   is visible. The seccomp filter of ``worker/grading/sandbox/seccomp.py`` applies to both (Docker: the same rules
   as a JSON profile; Docker's default profile is not enough, since it allows ``ptrace`` in a container).
2. IPC: the judge listens on ``/job/ipc/judge.sock`` (a Unix stream socket, mode 0666); the subject
   connects to it (retrying up to 30 s). Both see the **same** host folder ``ipc/``; the subject needs only
   read access (connecting is not writing the folder). ``--network none`` does not block Unix sockets. The
   two may start in any order.
3. The run ends when the judge exits (or at the wall clock ``limits.timeout_s`` + the backend's margin):
   then every process of both roles is killed (whole trees: cgroup / container), and nothing - process,
   mount, cgroup, container, network - is left.
4. It returns a ``SandboxRun``: ``exit_code`` and ``timed_out`` of the **judge**; ``stdout``/``stderr`` of
   the **subject** (what the learner sees, each capped at ``limits.output_bytes``, ``output_truncated``
   when more came, ``output_exceeded`` when the backend stopped a flood); ``memory_exceeded`` when the
   subject hit its memory limit (OOM kill). ``judge_stderr`` is for operators only.
5. It never raises for anything the learner's code did; it raises ``SandboxUnavailable`` when the backend
   cannot run here (``check()`` says why, before any job) and ``PlatformError`` for our own failures.

The host reads back only ``out/result.json`` (``worker/jobdir.read_result``) and decides the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from worker.bank.specdata import Limits

Access = Literal["ro", "rw"]

ROLE_MOUNTS: dict[str, tuple[tuple[str, Access], ...]] = {
    "judge": (("job.json", "ro"), ("tests", "ro"), ("probes", "ro"), ("out", "rw"), ("ipc", "rw")),
    "subject": (("subject.json", "ro"), ("submission", "ro"), ("probes", "ro"), ("ipc", "ro")),
}
ROLES = ("judge", "subject")


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
    judge_stderr: bytes = b""


class Sandbox(Protocol):
    name: str
    isolated: bool

    def check(self) -> None:
        """Raise ``SandboxUnavailable`` with a clear message if this backend cannot run here."""

    def run(self, job_dir: Path, limits: Limits) -> SandboxRun:
        """Run the judge and the subject over ``job_dir`` under ``limits`` and report what happened."""
        ...
