"""Hand each grading job GPUs of its own: a pool of GPU ids shared by every worker process on a host.

Contract:
- ``parse_gpu_ids("0,1,2,3")`` returns ``("0", "1", "2", "3")``; ids are whatever ``nvidia-smi`` and the
  NVIDIA container toolkit accept (indexes or ``GPU-<uuid>``); blanks and duplicates are refused.
- ``GpuSlots(ids, per_job, lock_dir).acquire(timeout_s)`` returns a ``GpuLease`` holding ``per_job`` ids no
  other lease holds, waiting up to ``timeout_s`` for them; ``release()`` (or leaving the ``with`` block)
  gives them back. A process that dies gives its GPUs back with it.
- A GPU a process of this host found broken (``gpu_health``: marked in ``lock_dir``) is never leased again
  until a worker starts afresh; ``healthy()`` lists the others, and a host left with fewer than ``per_job``
  raises ``SandboxUnavailable`` (its jobs go back to the queue, for another host).
- Why file locks: Celery's prefork children, several worker processes and threads all draw from the same
  GPUs; ``flock`` on one file per id in ``lock_dir`` excludes them all and is released by the kernel when
  the holder exits, so a crashed worker never leaks a GPU.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import time
from pathlib import Path
from types import TracebackType

from worker.core.errors import HostUnfit, PlatformError, SandboxUnavailable
from worker.grading.sandbox.gpu_health import FailedGpus, file_name

GPU_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9:._-]{0,99}(@[A-Za-z0-9-]{1,80}/\d{1,3}/\d{1,3})?$")  # @: a MIG slot
RETRY_S = 0.2


def parse_gpu_ids(text: str) -> tuple[str, ...]:
    """Return the GPU ids of a comma-separated list; raise ``SandboxUnavailable`` on a malformed one."""
    ids = tuple(part.strip() for part in text.split(",") if part.strip())
    bad = [i for i in ids if not GPU_ID_RE.match(i)]
    if bad:
        raise SandboxUnavailable(f"GPULAB_GPU_IDS holds invalid GPU ids: {', '.join(map(repr, bad))}")
    if len(set(ids)) != len(ids):
        raise SandboxUnavailable(f"GPULAB_GPU_IDS names a GPU twice: {text!r}")
    return ids


class GpuLease:
    """GPUs held for one job until ``release()``."""

    def __init__(self, ids: tuple[str, ...], fds: list[int]) -> None:
        self.ids = ids
        self._fds = fds

    def release(self) -> None:
        """Give the GPUs back (closing the lock files drops the locks)."""
        fds, self._fds = self._fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> GpuLease:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


class GpuSlots:
    """The GPUs of this host and how many each job gets."""

    def __init__(self, ids: tuple[str, ...], per_job: int, lock_dir: Path) -> None:
        if not ids:
            raise SandboxUnavailable("no GPU ids configured: set GPULAB_GPU_IDS, e.g. 0,1,2,3")
        if not 1 <= per_job <= len(ids):
            raise SandboxUnavailable(
                f"GPULAB_GPUS_PER_JOB={per_job} cannot be served by {len(ids)} GPU(s) ({', '.join(ids)})"
            )
        self.ids = ids
        self.per_job = per_job
        self.lock_dir = lock_dir

    def _lock_path(self, gpu_id: str) -> Path:
        return self.lock_dir / f"gpu-{file_name(gpu_id)}.lock"

    @property
    def failed(self) -> FailedGpus:
        """The GPUs of this host found broken (``gpu_health``): no lease hands them out."""
        return FailedGpus(self.lock_dir)

    def healthy(self) -> tuple[str, ...]:
        """Return the ids no process of this host has marked broken."""
        broken = self.failed.failed(self.ids)
        return tuple(i for i in self.ids if i not in broken)

    def try_acquire(self) -> GpuLease | None:
        """Take ``per_job`` free, healthy GPUs now, or none and return ``None``."""
        self.lock_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        usable = self.healthy()
        if len(usable) < self.per_job:
            broken = self.failed.failed(self.ids)
            raise HostUnfit(
                f"{len(broken)} of this host's GPUs failed ("
                + "; ".join(f"{i}: {why}" for i, why in broken.items())
                + f"): fewer than the {self.per_job} a job needs are left"
            )
        taken: list[str] = []
        fds: list[int] = []
        for gpu_id in usable:
            fd = os.open(self._lock_path(gpu_id), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            taken.append(gpu_id)
            fds.append(fd)
            if len(taken) == self.per_job:
                return GpuLease(tuple(taken), fds)
        GpuLease(tuple(taken), fds).release()
        return None

    def acquire(self, timeout_s: float) -> GpuLease:
        """Return a lease on ``per_job`` GPUs, waiting up to ``timeout_s``; ``PlatformError`` if none free up."""
        deadline = time.monotonic() + timeout_s
        while True:
            lease = self.try_acquire()
            if lease is not None:
                return lease
            if time.monotonic() >= deadline:
                raise PlatformError(f"no {self.per_job} free GPU(s) among {', '.join(self.ids)} within {timeout_s:g} s")
            time.sleep(RETRY_S)
