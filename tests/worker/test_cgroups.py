"""Per-job cgroups on this host's real cgroup mount: limits, the parent's low CPU weight, kill and remove."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.bank.spec import Limits
from worker.core.errors import SandboxUnavailable
from worker.grading.sandbox.cgroups import PARENT_CPU_SHARES, JobCgroups, detect_layout

ROOT = Path("/sys/fs/cgroup")


@pytest.fixture
def parent() -> Iterator[str]:
    if detect_layout(ROOT) is None or not os.access(ROOT / "cpu" if (ROOT / "cpu").exists() else ROOT, os.W_OK):
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but this host has no writable cgroups")
        pytest.skip("no writable cgroups here")
    name = f"gpulab-test-{uuid.uuid4().hex[:8]}"
    yield name
    for group in ROOT.glob(f"*/{name}"):
        group.rmdir()
    if (ROOT / name).is_dir():
        (ROOT / name).rmdir()


def _cpu_parent(groups: JobCgroups) -> Path:
    return groups.dirs[2].parent if groups.layout == "hybrid" else groups.dirs[0].parent


def test_create_sets_limits_and_a_low_parent_weight(parent: str) -> None:
    groups = JobCgroups(ROOT, parent, "job")
    procs = groups.create(Limits(memory_mb=64, pids=16, cpus=0.5))
    try:
        assert all(p.exists() for p in procs)
        cpu_parent = _cpu_parent(groups)
        if groups.layout == "hybrid":
            assert (cpu_parent / "cpu.shares").read_text().strip() == str(PARENT_CPU_SHARES)
            assert (groups.dirs[2] / "cpu.cfs_quota_us").read_text().strip() == "50000"
            assert (groups.dirs[0] / "memory.limit_in_bytes").read_text().strip() == str(64 * 1024 * 1024)
        else:
            assert (cpu_parent / "cpu.weight").read_text().strip() == str(PARENT_CPU_SHARES * 100 // 1024)
            assert (groups.dirs[0] / "cpu.max").read_text().split()[0] == "50000"
    finally:
        groups.remove()
    assert not any(d.exists() for d in groups.dirs)


def test_kill_and_remove_end_every_process(parent: str) -> None:
    groups = JobCgroups(ROOT, parent, "job")
    procs = groups.create(Limits(memory_mb=64, pids=16))
    # A shell that joins the groups, then leaves a sleeping child behind.
    script = "; ".join(f"echo $$ > {p}" for p in procs) + "; sleep 60 & sleep 60"
    proc = subprocess.Popen(["sh", "-c", script])
    try:
        for _ in range(200):
            if len((procs[0]).read_text().split()) >= 2:
                break
            subprocess.run(["sleep", "0.01"], check=True)
        assert len(procs[0].read_text().split()) >= 2
        groups.remove()
        assert proc.wait(timeout=5) == -9
        assert not any(d.exists() for d in groups.dirs)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_unusable_root_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailable, match="no usable cgroups"):
        JobCgroups(tmp_path, "gpulab", "job")


# --- device rules (cgroup v1 ``devices``): stand-in nodes of a major no driver claims ---------------------------
# Opening such a node fails with ENXIO ("no such device") once the cgroup lets it through, and with EPERM when
# the cgroup refuses it: the errno tells which one decided.
STAND_IN_MAJOR = 240  # Linux's range for local/experimental use (Documentation/admin-guide/devices.txt)

OPEN_EACH = """
import errno, sys
for path in sys.argv[1:]:
    try:
        open(path, "rb").close()
        print("opened")
    except OSError as exc:
        print(errno.errorcode[exc.errno])
"""


@pytest.fixture
def stand_in_nodes(tmp_path: Path) -> dict[str, Path]:
    if not (ROOT / "devices" / "cgroup.procs").exists():
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but this host has no cgroup v1 devices hierarchy")
        pytest.skip("no cgroup v1 devices hierarchy here")
    nodes = {}
    for minor, name in enumerate(("mine", "other"), start=1):
        nodes[name] = tmp_path / name
        os.mknod(nodes[name], 0o600 | 0o020000, os.makedev(STAND_IN_MAJOR, minor))
    return nodes


def _open_in(procs: list[Path], *paths: Path) -> list[str]:
    """Open each path from a process that first joined ``procs``; return what happened to each."""
    script = "".join(f"echo $$ > {p}; " for p in procs) + 'exec python3 -c "$0" "$@"'
    result = subprocess.run(["sh", "-c", script, OPEN_EACH, *map(str, paths)], capture_output=True, text=True,
                            check=True, timeout=60)  # fmt: skip
    return result.stdout.split()


def test_a_job_opens_only_the_devices_its_rules_allow(parent: str, stand_in_nodes: dict[str, Path]) -> None:
    mine, other = stand_in_nodes["mine"], stand_in_nodes["other"]
    assert _open_in([], mine, other) == ["ENXIO", "ENXIO"]  # outside any job: both reach the (absent) driver
    groups = JobCgroups(ROOT, parent, "job")
    procs = groups.create(Limits(memory_mb=64, pids=16), devices=(f"c {STAND_IN_MAJOR}:1 rw", "c 1:3 rw"))
    try:
        assert groups.devices_dir is not None and groups.devices_dir / "cgroup.procs" in procs
        listed = (groups.devices_dir / "devices.list").read_text().split("\n")
        assert listed[:2] == [f"c {STAND_IN_MAJOR}:1 rw", "c 1:3 rw"]
        assert _open_in(procs, mine, other, Path("/dev/null"), Path("/dev/zero")) == [
            "ENXIO", "EPERM", "opened", "EPERM"]  # fmt: skip
    finally:
        groups.remove()
    assert not groups.devices_dir.exists()


def test_no_rules_given_no_device_group(parent: str, stand_in_nodes: dict[str, Path]) -> None:
    groups = JobCgroups(ROOT, parent, "job")
    procs = groups.create(Limits(memory_mb=64, pids=16))
    try:
        assert groups.devices_dir is not None and not groups.devices_dir.exists()
        assert _open_in(procs, stand_in_nodes["other"]) == ["ENXIO"]
    finally:
        groups.remove()


def test_a_rule_the_parent_refuses_is_named_and_leaves_nothing(parent: str, stand_in_nodes: dict[str, Path]) -> None:
    # A worker whose own group was not granted the node (a container without that GPU) cannot grant it a job.
    (ROOT / "devices" / parent).mkdir()
    (ROOT / "devices" / parent / "devices.deny").write_text(f"c {STAND_IN_MAJOR}:2 rwm")
    groups = JobCgroups(ROOT, parent, "job")
    with pytest.raises(SandboxUnavailable, match=f"the device rule 'c {STAND_IN_MAJOR}:2 rw' is not allowed"):
        groups.create(Limits(memory_mb=64, pids=16), devices=(f"c {STAND_IN_MAJOR}:2 rw",))
    assert not any(d.exists() for d in groups.dirs)
