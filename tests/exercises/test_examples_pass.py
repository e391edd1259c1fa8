"""Every code exercise's reference solution passes that exercise's visible ``examples/`` tests.

The examples are what learners run before submitting; a failing example on a correct solution would tell
them their right answer is wrong. Each solution is graded against the examples exactly as
``worker.grading.examples.run_examples`` grades a learner's "run examples" request, in the real local sandbox
(bubblewrap and cgroups), one exercise per test case. Framework imports make this slow.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.core.errors import SandboxUnavailable
from tests.support import BANK
from worker.grading.examples import run_examples
from worker.core.outcome import TestOutcomeKind, Verdict
from worker.grading.sandbox.local import LocalSandbox
from worker.bank.spec import ExerciseSpec, load_bank

pytestmark = pytest.mark.slow

SANDBOX_USER = "gpulab-sandbox"
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_NAME = "gpulab-test-examples"


def _with_examples() -> list[ExerciseSpec]:
    return [s for s in load_bank(BANK) if s.kind == "code" and s.example_test_files]


@pytest.fixture(scope="module")
def sandbox() -> Iterator[LocalSandbox]:
    """The real local sandbox; off CI, skipped when this host cannot run it (not root, no cgroups)."""
    ci = os.environ.get("CI") == "true"
    try:
        pwd.getpwnam(SANDBOX_USER)
    except KeyError:
        if os.geteuid() != 0 or not shutil.which("useradd"):
            if ci:
                pytest.fail(f"CI=true but the {SANDBOX_USER} user is missing and cannot be created")
            pytest.skip(f"the local sandbox needs root to create the {SANDBOX_USER} user")
        subprocess.run(["useradd", "-r", "-M", "-s", "/usr/sbin/nologin", SANDBOX_USER], check=True)
    box = LocalSandbox(user=SANDBOX_USER, cgroup_root=CGROUP_ROOT, cgroup_name=CGROUP_NAME, timeout_margin_s=5.0)
    try:
        box.check()
    except SandboxUnavailable as exc:
        if ci:
            pytest.fail(f"CI=true but the local sandbox cannot run: {exc}")
        pytest.skip(f"local sandbox unavailable here: {exc}")
    yield box
    for parent in CGROUP_ROOT.glob(f"*/{CGROUP_NAME}"):
        with contextlib.suppress(OSError):
            parent.rmdir()


def test_some_exercises_have_examples() -> None:
    assert len(_with_examples()) >= 3, "the bank's code exercises should ship visible examples"


@pytest.mark.parametrize("spec", _with_examples(), ids=lambda s: s.slug)
def test_solution_passes_examples(spec: ExerciseSpec, sandbox: LocalSandbox) -> None:
    outcome = run_examples(spec, spec.rendered("solution.py", spec.default_params), sandbox=sandbox)
    failing = [f"{t.name}: {t.outcome.value}: {t.message[:300]}" for t in outcome.tests if t.outcome is not TestOutcomeKind.passed]
    assert outcome.verdict is Verdict.passed and not failing and outcome.tests, (
        f"{spec.slug}/solution.py against examples/: verdict {outcome.verdict.value} ({outcome.message[:300]}), "
        f"{len(outcome.tests)} example tests, failing: {failing}\nstderr: {outcome.stderr[-500:]}"
    )
