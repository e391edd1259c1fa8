"""Per-job cgroups: create them with the job's limits, kill everything inside, detect OOM, remove them.

Contract:
- Two layouts are understood. ``hybrid``: cgroup v1 ``memory``, ``pids`` and ``cpu`` hierarchies under
  ``root`` (plus the v2 tree at ``root/unified`` when present, used only for ``cgroup.kill``). ``v2``: a
  pure cgroup v2 mount at ``root`` whose ``parent`` group may enable memory, pids and cpu for its children.
- ``JobCgroups.create(limits, devices=rules)`` makes ``<root>/<controller>/<parent>/<job>`` (v2:
  ``<root>/<parent>/<job>``) and returns the ``cgroup.procs`` files a launcher writes its own pid into before exec.
- Device rules: where the v1 ``devices`` hierarchy is mounted, a job given ``devices`` (``gpu_devices.device_rules``)
  also gets ``<root>/devices/<parent>/<job>``, which refuses every device (``devices.deny a``) but those rules.
  A rule the parent group does not allow (a container whose engine did not grant that GPU) is refused by the
  kernel and raises ``SandboxUnavailable`` naming it. cgroup v2 has no such files (its device rules are eBPF
  programs, which are not attached here): there a sandbox's devices are only the nodes its mount plan binds,
  and no sandbox can make a node (no ``CAP_MKNOD``, ``nodev`` on every other mount).
- ``kill()`` ends every process inside; ``remove()`` kills, waits for the groups to empty and removes them.
- The shared ``parent`` group gets a low CPU weight (``PARENT_CPU_SHARES`` of cgroup v1's default 1024, or the
  same fraction of v2's default ``cpu.weight`` 100): under contention the web server and the worker's own
  threads run before sandboxes, so a page stays fast while gradings saturate the cores; with nothing else to
  run the weight costs gradings nothing. Each job's own CPU quota (``cpu.cfs_quota_us``/``cpu.max``) is
  unchanged.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from worker.bank.spec import Limits
from worker.core.errors import SandboxUnavailable

V1_CONTROLLERS = ("memory", "pids", "cpu")
V1_DEVICES = "devices"
CFS_PERIOD_US = 100_000
EMPTY_WAIT_S = 3.0
# One eighth of a default group's share: requests of the API preempt grading; idle cores still go to grading.
PARENT_CPU_SHARES = 128
V1_DEFAULT_SHARES = 1024
V2_DEFAULT_WEIGHT = 100


def detect_layout(root: Path) -> str | None:
    """Return ``hybrid``, ``v2`` or ``None`` for the cgroup mount at ``root``."""
    if all((root / c / "cgroup.procs").exists() for c in V1_CONTROLLERS):
        return "hybrid"
    controllers = root / "cgroup.controllers"
    if controllers.exists() and set(V1_CONTROLLERS) <= set(controllers.read_text().split()):
        return "v2"
    return None


def _write(path: Path, value: str) -> None:
    path.write_text(value)


def _pids(procs: Path) -> list[int]:
    try:
        return [int(line) for line in procs.read_text().split()]
    except OSError:
        return []


class JobCgroups:
    """The cgroups of one sandbox run."""

    def __init__(self, root: Path, parent: str, job: str) -> None:
        layout = detect_layout(root)
        if layout is None:
            raise SandboxUnavailable(
                f"no usable cgroups at {root}: need cgroup v1 memory, pids and cpu, or cgroup v2 with them enabled"
            )
        self.layout = layout
        self.root = root
        if layout == "hybrid":
            self.dirs = [root / c / parent / job for c in V1_CONTROLLERS]
            unified = root / "unified"
            if (unified / "cgroup.procs").exists():
                self.dirs.append(unified / parent / job)
        else:
            self.dirs = [root / parent / job]
        # The v1 devices hierarchy, where it is mounted (a job given device rules gets a group there too).
        has_devices = layout == "hybrid" and (root / V1_DEVICES / "cgroup.procs").exists()
        self.devices_dir = root / V1_DEVICES / parent / job if has_devices else None
        self.created: list[Path] = []

    def _dir(self, controller: str) -> Path:
        return self.dirs[V1_CONTROLLERS.index(controller)] if self.layout == "hybrid" else self.dirs[0]

    @property
    def procs_files(self) -> list[Path]:
        return [d / "cgroup.procs" for d in self.dirs]

    def create(self, limits: Limits, *, devices: tuple[str, ...] | None = None) -> list[Path]:
        """Create the groups with ``limits`` and, given ``devices``, those rules; return the procs files to join."""
        memory = str(limits.memory_mb * 1024 * 1024)
        quota = max(1000, int(limits.cpus * CFS_PERIOD_US))
        device_group = self.devices_dir if devices is not None else None
        if device_group is not None:
            self.dirs.append(device_group)
        try:
            for d in self.dirs:
                d.parent.mkdir(exist_ok=True)
                if self.layout == "v2":
                    _write(d.parent / "cgroup.subtree_control", "+memory +pids +cpu")
                d.mkdir()
                self.created.append(d)
            self._lower_parent_weight()
            if self.layout == "hybrid":
                mem = self._dir("memory")
                _write(mem / "memory.limit_in_bytes", memory)
                if (mem / "memory.memsw.limit_in_bytes").exists():
                    _write(mem / "memory.memsw.limit_in_bytes", memory)
                _write(self._dir("pids") / "pids.max", str(limits.pids))
                _write(self._dir("cpu") / "cpu.cfs_period_us", str(CFS_PERIOD_US))
                _write(self._dir("cpu") / "cpu.cfs_quota_us", str(quota))
            else:
                d = self.dirs[0]
                _write(d / "memory.max", memory)
                if (d / "memory.swap.max").exists():
                    _write(d / "memory.swap.max", "0")
                _write(d / "pids.max", str(limits.pids))
                _write(d / "cpu.max", f"{quota} {CFS_PERIOD_US}")
            if device_group is not None and devices is not None:
                self._allow_only(device_group, devices)
        except SandboxUnavailable:
            self.remove()
            raise
        except OSError as exc:
            self.remove()
            raise SandboxUnavailable(f"cannot set up cgroups under {self.root}: {exc}") from exc
        return self.procs_files

    @staticmethod
    def _allow_only(group: Path, rules: tuple[str, ...]) -> None:
        """Refuse every device in the devices ``group`` but ``rules`` (``c major:minor access`` lines)."""
        _write(group / "devices.deny", "a")
        for rule in rules:
            try:
                _write(group / "devices.allow", rule)
            except PermissionError as exc:
                raise SandboxUnavailable(f"the device rule {rule!r} is not allowed to this worker's cgroup") from exc

    def _lower_parent_weight(self) -> None:
        """Give the shared parent group its low CPU weight (see the module contract)."""
        if self.layout == "hybrid":
            path, value = self._dir("cpu").parent / "cpu.shares", PARENT_CPU_SHARES
        else:
            path = self.dirs[0].parent / "cpu.weight"
            value = max(1, PARENT_CPU_SHARES * V2_DEFAULT_WEIGHT // V1_DEFAULT_SHARES)
        if path.exists() and path.read_text().strip() != str(value):
            _write(path, str(value))

    def kill(self) -> None:
        """Kill every process in the groups: ``cgroup.kill`` when the kernel has it, else SIGKILL each pid."""
        for d in self.created:
            if (d / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    _write(d / "cgroup.kill", "1")
        # Signalling pids one by one races with forks; repeat until no pid is left (pids.max bounds the work).
        pause_s = 0.001  # most jobs are gone within a few ms of the kill: look again soon, then back off
        for _ in range(60):
            pids = {pid for d in self.created for pid in _pids(d / "cgroup.procs")}
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(pause_s)
            pause_s = min(0.02, pause_s * 2)

    def oom_killed(self) -> bool:
        """Say whether the kernel's OOM killer fired inside the job's memory group."""
        path = self._dir("memory") / ("memory.oom_control" if self.layout == "hybrid" else "memory.events")
        try:
            fields = dict(line.split() for line in path.read_text().splitlines() if len(line.split()) == 2)
        except OSError:
            return False
        return int(fields.get("oom_kill", "0")) > 0

    def remove(self) -> None:
        """Kill what is left, wait for the groups to empty, and remove them."""
        self.kill()
        deadline = time.monotonic() + EMPTY_WAIT_S
        for d in reversed(self.created):
            while True:
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    self.kill()
                    time.sleep(0.02)
        self.created.clear()
