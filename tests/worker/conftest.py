"""Shared fixtures for worker tests: a tiny exercise and a real local sandbox."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from worker.bank.spec import ExerciseSpec
from worker.core.errors import SandboxUnavailable
from worker.grading.sandbox.local import LocalSandbox

SANDBOX_USER = "gpulab-sandbox"
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_NAME = "gpulab-test"


def tiny_add_files(**limits: float) -> dict[str, str]:
    """Return the files of a two-test exercise about ``add``; ``limits`` go to ``[limits]``."""
    limit_lines = "".join(f"{key} = {value}\n" for key, value in limits.items())
    return {
        "exercise.toml": f'title = "Tiny add"\n\n[points]\n"test_add.py::test_small" = 1\n'
        f'"test_add.py::test_negative" = 2\n\n[limits]\n{limit_lines}',
        "prompt.md": "Write `add(a, b)`.\n",
        "starter.py": "def add(a, b):\n    raise NotImplementedError\n",
        "solution.py": "def add(a, b):\n    return a + b\n",
        "tests/test_add.py": textwrap.dedent(
            """
            def test_small(submission):
                assert submission.add(1, 2) == 3, "add(1, 2) should be 3"

            def test_negative(submission):
                assert submission.add(-1, -1) == -2, "add(-1, -1) should be -2"
            """
        ),
    }


@pytest.fixture
def tiny_spec() -> Callable[..., ExerciseSpec]:
    """Return a factory: ``tiny_spec(timeout_s=2, ...)`` builds the tiny-add exercise with those limits."""

    def build(**limits: float) -> ExerciseSpec:
        return ExerciseSpec.from_files("tiny-add", tiny_add_files(**limits))

    return build


@pytest.fixture(scope="session")
def sandbox_user() -> pwd.struct_passwd:
    """Make sure the sandbox user exists; skip only off CI when we are not root."""
    ci = os.environ.get("CI") == "true"
    try:
        return pwd.getpwnam(SANDBOX_USER)
    except KeyError:
        pass
    if os.geteuid() != 0 or not shutil.which("useradd"):
        if ci:
            pytest.fail(f"CI=true but the {SANDBOX_USER} user is missing and cannot be created")
        pytest.skip(f"the local sandbox needs root to create the {SANDBOX_USER} user")
    subprocess.run(["useradd", "-r", "-M", "-s", "/usr/sbin/nologin", SANDBOX_USER], check=True)
    return pwd.getpwnam(SANDBOX_USER)


@pytest.fixture(scope="session")
def local_sandbox(sandbox_user: pwd.struct_passwd) -> Iterator[LocalSandbox]:
    """A real local sandbox with a short margin, skipped off CI only when the host cannot run it."""
    sandbox = LocalSandbox(user=SANDBOX_USER, cgroup_root=CGROUP_ROOT, cgroup_name=CGROUP_NAME, timeout_margin_s=1.0)
    try:
        sandbox.check()
    except SandboxUnavailable as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but the local sandbox cannot run: {exc}")
        pytest.skip(f"local sandbox unavailable here: {exc}")
    yield sandbox
    # Job groups are removed by every run; the shared parent groups of this test session go too.
    for parent in CGROUP_ROOT.glob(f"*/{CGROUP_NAME}"):
        with contextlib.suppress(OSError):
            parent.rmdir()


@pytest.fixture
def leftovers() -> Callable[[int], tuple[list[str], list[str]]]:
    """Return ``leftover_state`` so tests can assert a run left nothing behind."""
    return leftover_state


def leftover_state(uid: int) -> tuple[list[str], list[str]]:
    """Return the job cgroups left under the test parent and the live processes of ``uid`` in them."""
    groups = [str(p) for p in CGROUP_ROOT.glob(f"*/{CGROUP_NAME}/*") if p.is_dir()]
    live = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line)
        except (OSError, ValueError):
            continue
        if fields.get("Uid", "").split()[:1] != [str(uid)] or fields.get("State", "").startswith("Z"):
            continue
        # Only this suite's jobs count: other gradings (a server under test, another suite) may run meanwhile.
        try:
            ours = CGROUP_NAME in (status.parent / "cgroup").read_text()
        except OSError:
            continue
        if ours:
            live.append(f"{status.parent.name} {fields.get('Name', '').strip()}")
    return groups, live
