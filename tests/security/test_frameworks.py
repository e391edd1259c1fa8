"""The frameworks still import and compute under the seccomp filter and limits (slow: TF import takes seconds)."""

from __future__ import annotations

import textwrap

import pytest

from tests.security.conftest import tiny_files
from worker.bank.spec import ExerciseSpec
from worker.grading.pipeline import grade
from worker.grading.sandbox.base import Sandbox

pytestmark = pytest.mark.slow

CASES = {
    "torch": ("import torch\nprint('RESULT', float(torch.ones(3) @ torch.ones(3)))\n", "RESULT 3.0"),
    "tensorflow": ("import tensorflow as tf\nprint('RESULT', int(tf.constant(1) + 1))\n", "RESULT 2"),
}


@pytest.mark.parametrize("framework", list(CASES))
def test_framework_runs_in_the_sandbox(backend: Sandbox, framework: str) -> None:
    pytest.importorskip(framework)
    code, expected = CASES[framework]
    spec = ExerciseSpec.from_files("tiny-add", tiny_files(timeout_s=90, memory_mb=3072, pids=128))
    outcome = grade(spec, textwrap.dedent(code) + "\ndef add(a, b):\n    return a + b\n", sandbox=backend)
    assert outcome.verdict.value == "passed", outcome
    assert expected in outcome.stdout, outcome.stdout[-2000:]
