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
