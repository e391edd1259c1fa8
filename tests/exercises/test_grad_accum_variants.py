"""torch-ddp-grad-accum grades each learner's own run (its MICRO and ACCUM parameters), in the real sandbox.

An answer written for another learner's numbers (here: the default variant's, as a copied solution would be)
fails in a variant it was not written for, and the failure quotes the learner's own numbers; the same file
passes in the variant it was written for. ``test_bank_checks.py`` proves the bank's files in the checked variants.
"""

from __future__ import annotations

import pytest

from tests.support import BANK
from worker.bank.spec import load_exercise
from worker.core.outcome import Verdict
from worker.grading.pipeline import grade
from worker.grading.sandbox.base import Sandbox

pytestmark = pytest.mark.slow

SLUG = "torch-ddp-grad-accum"
WRITTEN_FOR = {"accum": 4, "micro": 4}  # the default variant: windows of 4, 4 and 3, 6 steps


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("mine", "failing", "said"),
    [
        # The same 6 steps of one all-reduce each: only the weights, against the learner's windows, tell.
        (
            {"accum": 5, "micro": 4},
            ["test_grad_accum.py::test_gradients_equal_large_batch"],
            ["MICRO = 4 and ACCUM = 5 (your prompt's numbers", "windows of 5, 5, 1 micro-batches"],
        ),
        (
            {"accum": 3, "micro": 2},
            ["test_grad_accum.py::test_steps_once_per_window", "test_grad_accum.py::test_gradients_equal_large_batch"],
            ["made 6 optimizer steps in 2 epochs; expected 16: with MICRO = 2 and ACCUM = 3", "22 micro-batches"],
        ),
    ],
    ids=["same-steps", "other-steps"],
)
def test_an_answer_for_other_numbers_fails_in_the_learners_variant(
    mine: dict[str, int], failing: list[str], said: list[str], bank_sandbox: Sandbox
) -> None:
    spec = load_exercise(BANK / SLUG)
    assert spec.default_params == WRITTEN_FOR
    offered = {p.name: p.values for p in spec.params}
    assert all(value in offered[name] for name, value in mine.items()), "a variant learners can get"
    hard_coded = spec.rendered("solution.py", WRITTEN_FOR)

    outcome = grade(spec, hard_coded, sandbox=bank_sandbox, params=mine)
    assert outcome.verdict is Verdict.failed, outcome
    failed = [t for t in outcome.tests if t.outcome.value != "passed"]
    assert [t.name for t in failed] == failing, [(t.name, t.message) for t in failed]
    messages = " ".join(" ".join(t.message.split()) for t in failed)
    for text in said:
        assert text in messages, messages

    written_for = grade(spec, hard_coded, sandbox=bank_sandbox, params=WRITTEN_FOR)
    assert written_for.verdict is Verdict.passed and written_for.score == spec.max_score, written_for
