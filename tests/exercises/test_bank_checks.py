"""Every exercise of the bank grades as its author intends (``worker.grading.bankcheck``), in the real sandbox.

The reference solution and right alternatives pass with full marks; each wrong variant fails the tests its
``[[wrong]]`` entry names with the feedback it declares; parameterised exercises are checked in their checked
variants. This is ``gpulab exercises check`` run in-process over the warm ``bank_sandbox`` (the command
itself is tested in ``tests/e2e/test_cli.py``): one exercise per test, so a failure names its exercise, its
variants graded as many at once as the machine has cores (a worker's sandbox serves concurrent jobs too).
"""

from __future__ import annotations

import os
import time

import pytest

from tests.support import BANK
from worker.bank.spec import load_bank
from worker.grading.bankcheck import check_bank
from worker.grading.sandbox.base import Sandbox

pytestmark = pytest.mark.slow

SLUGS = sorted(spec.slug for spec in load_bank(BANK))
JOBS = max(1, min(4, os.cpu_count() or 1))


@pytest.mark.timeout(900)
@pytest.mark.parametrize("slug", SLUGS)
def test_the_exercise_checks_out(slug: str, bank_sandbox: Sandbox, capsys: pytest.CaptureFixture[str]) -> None:
    lines: list[str] = []
    started = time.monotonic()
    problems = check_bank(BANK, [slug], sandbox=bank_sandbox, echo=lines.append, jobs=JOBS)
    # The bank check's own time, in CI's output: the bank grows with every blind pass (issue 32).
    with capsys.disabled():
        print(f"\nbank check {slug}: {len(lines) - 1} variants in {time.monotonic() - started:.0f} s ({JOBS} at once)")
    assert problems == [], "\n".join([*problems, "", *lines])
    assert lines[0].startswith(f"{slug} (version ")  # the exercise was found and graded, not skipped
