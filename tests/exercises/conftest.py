"""The sandbox the bank's own checks grade in: the real local backend, warm, as a deployed worker grades.

Contract: ``bank_sandbox`` is one ``WarmLocalSandbox`` (bubblewrap, cgroups, the sandbox users) over the
session's ``warm_pool``, so the reference solutions, right alternatives, wrong variants and examples of every
exercise reuse templates that imported torch or TensorFlow once, instead of importing them afresh per file.
Off CI it skips where this host cannot run the sandbox (not root, no cgroups); with ``CI=true`` that fails.
"""

from __future__ import annotations

import contextlib
import os
import pwd
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.core.errors import SandboxUnavailable
from worker.grading.sandbox.warm import WarmLocalSandbox, WarmPool

SANDBOX_USERS = ("gpulab-sandbox", "gpulab-judge")
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_NAME = "gpulab-test-bank"


def _unavailable(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def bank_sandbox(warm_pool: WarmPool) -> Iterator[WarmLocalSandbox]:
    """The warm local sandbox every bank check of this run grades in."""
    for user in SANDBOX_USERS:
        try:
            pwd.getpwnam(user)
        except KeyError:
            _unavailable(f"the sandbox user {user} is missing (scripts/setup creates it)")
    box = WarmLocalSandbox(pool=warm_pool, cgroup_root=CGROUP_ROOT, cgroup_name=CGROUP_NAME, timeout_margin_s=5.0)
    try:
        box.check()
    except SandboxUnavailable as exc:
        _unavailable(f"the local sandbox cannot run here: {exc}")
    yield box
    for parent in CGROUP_ROOT.glob(f"*/{CGROUP_NAME}"):
        with contextlib.suppress(OSError):
            parent.rmdir()
