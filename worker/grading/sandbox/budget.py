"""The limits on the warm templates and container pairs of one grading process: memory, and idle time.

Contract:
- ``COST_MB``: the resident memory of one warm process by the framework it imported (a subject template, a
  judge template, or one container of a pair), measured on this bank (``docs/benchmarks.md``) and rounded up:
  plain Python 40 MB, torch 320 MB, TensorFlow 520 MB. ``cost_mb(runtime)`` reads it.
- ``default_budget_mb()``: a quarter of the machine's memory (``MemTotal``; 2 GiB when it cannot be read), at
  least 512 MB. ``GPULAB_WARM_MEMORY_MB`` replaces it (``budget_mb(settings_value)``: 0 means the default).
- ``MemoryBudget``: ``reserve(mb)`` says whether ``mb`` more fits (and takes it), ``release(mb)`` gives it back,
  ``adjust(old, new)`` replaces an estimate by what was measured (it may go over the total: the next reservations
  then wait for memory to come back); thread-safe. A pool that cannot reserve, and finds nothing idle to close
  for it, starts nothing: that job runs cold, as without warm pools.
- ``measured_mb(pid)``: what a live warm process holds, read from the kernel (its proportional set size from
  ``/proc/PID/smaps_rollup``, else its resident size), or None when it cannot be read.
- ``shared_budget(total_mb)``: one budget per process, shared by its pools (the first caller sizes it).
- ``Reaper(reap, idle_s, name=...)``: a daemon thread that calls ``reap()`` every ``reap_interval_s(idle_s)``
  (a quarter of the idle time, between 1 s and a minute) until ``stop()``; an exception is logged, never fatal.
  Both pools close what was idle for ``idle_s`` with it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)
COST_MB = {"python": 40, "torch": 320, "tensorflow": 520}
FALLBACK_MEMORY_MB = 2048
MIN_BUDGET_MB = 512


def cost_mb(runtime: str) -> int:
    """Return what one warm process of ``runtime`` (``python``, ``torch``, ``tensorflow``) holds."""
    return COST_MB.get(runtime, COST_MB["tensorflow"])


def machine_memory_mb(meminfo: Path = Path("/proc/meminfo")) -> int:
    """Return the machine's memory in MB (``FALLBACK_MEMORY_MB`` when ``meminfo`` cannot be read)."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return FALLBACK_MEMORY_MB


def default_budget_mb() -> int:
    return max(MIN_BUDGET_MB, machine_memory_mb() // 4)


def budget_mb(configured_mb: int) -> int:
    """Return ``GPULAB_WARM_MEMORY_MB`` when set (not 0), else ``default_budget_mb()``."""
    return configured_mb if configured_mb > 0 else default_budget_mb()


class MemoryBudget:
    """Megabytes the warm processes of this process may hold (see the module contract)."""

    def __init__(self, total_mb: int) -> None:
        self.total_mb = total_mb
        self.used_mb = 0
        self._lock = threading.Lock()
        self._refused_once: set[int] = set()

    def reserve(self, mb: int, *, what: str = "") -> bool:
        with self._lock:
            if self.used_mb + mb > self.total_mb:
                if mb not in self._refused_once:  # say it once per size, not at every job
                    self._refused_once.add(mb)
                    log.info(
                        "warm memory budget full (%d of %d MB used): %s starts cold; raise GPULAB_WARM_MEMORY_MB "
                        "to keep it warm", self.used_mb, self.total_mb, what or f"{mb} MB",
                    )  # fmt: skip
                return False
            self.used_mb += mb
            return True

    def release(self, mb: int) -> None:
        with self._lock:
            self.used_mb = max(0, self.used_mb - mb)

    def adjust(self, old_mb: int, new_mb: int) -> None:
        """Replace a reservation of ``old_mb`` by ``new_mb`` (a measured size for an estimated one)."""
        with self._lock:
            self.used_mb = max(0, self.used_mb - old_mb + new_mb)


def measured_mb(pid: int, proc: Path = Path("/proc")) -> int | None:
    """Return the megabytes process ``pid`` holds (proportional set size, else resident), or None."""
    for name, field in (("smaps_rollup", "Pss:"), ("status", "VmRSS:")):
        try:
            for line in (proc / str(pid) / name).read_text().splitlines():
                if line.startswith(field):
                    return max(1, -(-int(line.split()[1]) // 1024))  # kB, rounded up to MB
        except (OSError, ValueError, IndexError):
            continue
    return None


def reap_interval_s(idle_s: float) -> float:
    return min(60.0, max(1.0, idle_s / 4))


class Reaper:
    """Call ``reap()`` every ``reap_interval_s(idle_s)`` in a daemon thread until ``stop()``."""

    def __init__(self, reap: Callable[[], object], idle_s: float, *, name: str) -> None:
        self._reap = reap
        self._interval_s = reap_interval_s(idle_s)
        self._stop = threading.Event()
        threading.Thread(target=self._run, name=name, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self._reap()
            except Exception:  # never let the reaper die
                log.exception("reaping idle warm processes failed")

    def stop(self) -> None:
        self._stop.set()


_shared: MemoryBudget | None = None
_shared_lock = threading.Lock()


def shared_budget(total_mb: int) -> MemoryBudget:
    """Return this process's budget, made with ``total_mb`` by the first caller."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = MemoryBudget(total_mb)
        return _shared
