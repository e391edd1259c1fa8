"""Every code exercise's reference solution passes that exercise's visible ``examples/`` tests.

The examples are what learners run before submitting; a failing example on a correct solution would tell
them their right answer is wrong. Each solution is graded against the examples exactly as
``worker.grading.examples.run_examples`` grades a learner's "run examples" request, in the real local sandbox
(bubblewrap and cgroups; warm, see ``conftest.bank_sandbox``), one exercise per test case.
"""

from __future__ import annotations

import pytest

from tests.support import BANK
from worker.bank.spec import ExerciseSpec, load_bank
from worker.core.outcome import TestOutcomeKind, Verdict
from worker.grading.examples import run_examples
from worker.grading.sandbox.base import Sandbox

pytestmark = pytest.mark.slow


def _with_examples() -> list[ExerciseSpec]:
    return [s for s in load_bank(BANK) if s.kind == "code" and s.example_test_files]


def test_some_exercises_have_examples() -> None:
    assert len(_with_examples()) >= 3, "the bank's code exercises should ship visible examples"


@pytest.mark.parametrize("spec", _with_examples(), ids=lambda s: s.slug)
def test_solution_passes_examples(spec: ExerciseSpec, bank_sandbox: Sandbox) -> None:
    outcome = run_examples(spec, spec.rendered("solution.py", spec.default_params), sandbox=bank_sandbox)
    failing = [f"{t.name}: {t.outcome.value}: {t.message[:300]}" for t in outcome.tests if t.outcome is not TestOutcomeKind.passed]
    assert outcome.verdict is Verdict.passed and not failing and outcome.tests, (
        f"{spec.slug}/solution.py against examples/: verdict {outcome.verdict.value} ({outcome.message[:300]}), "
        f"{len(outcome.tests)} example tests, failing: {failing}\nstderr: {outcome.stderr[-500:]}"
    )
