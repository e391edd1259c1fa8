"""``app.domain.exercises.notebooks`` on the real bank: the downloaded notebook's example cells, run in a Python
namespace as a
kernel runs them, pass for the reference solution and fail with the example's own message for a known-wrong one."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import nbformat
import pytest
from sqlalchemy.orm import Session

from app.domain.exercises import notebooks
from app.domain.exercises.bank import upsert_exercise
from tests.support import BANK, bank_file
from worker.bank.spec import load_exercise

pytestmark = pytest.mark.postgres
SLUG = "python-split-batch"


def _run(notebook: Any, answer: str) -> str:
    """Run every code cell in one namespace with ``answer`` as the solution cell; return what was printed."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        for cell in notebook.cells:
            if cell.cell_type == "code":
                source = answer if notebooks.SOLUTION_TAG in cell.metadata.get("tags", []) else cell.source
                exec(compile(source, "<cell>", "exec"), namespace)  # noqa: S102  (the notebook a learner runs)
    return printed.getvalue()


def test_the_bank_exercises_notebook_runs_its_examples_against_the_solution_cell(db_session: Session) -> None:
    exercise, _ = upsert_exercise(session=db_session, spec=load_exercise(BANK / SLUG))
    db_session.flush()
    notebook = nbformat.reads(notebooks.notebook_text(exercise), as_version=4)
    nbformat.validate(notebook)
    assert [c.metadata.get("tags") for c in notebook.cells if c.cell_type == "code"] == [
        ["solution"],
        ["examples"],
        ["examples"],
    ]
    passed = _run(notebook, bank_file(SLUG, "solution.py"))
    assert "test_examples.py: 2 passed, 0 failed" in passed, passed
    failed = _run(notebook, bank_file(SLUG, "wrong/round_robin.py"))
    assert "FAIL test_example_even_split: AssertionError: split_batch([0, 1, 2, 3, 4, 5], 3) returned" in failed
    assert "test_examples.py: 0 passed, 2 failed" in failed
    starter = _run(notebook, bank_file(SLUG, "starter.py"))
    assert "NotImplementedError: split_batch is not written yet" in starter
    # What is graded is the solution cell, whatever the other cells hold.
    assert notebooks.extract_code(nbformat.writes(notebook), slug=SLUG) == bank_file(SLUG, "starter.py").rstrip() + "\n"


def test_an_example_that_needs_the_grader_is_skipped_in_a_notebook_with_the_reason() -> None:
    namespace: dict[str, Any] = {"add": lambda a, b: a + b}
    # A module only the grader has (not `runner`: an earlier test may have put the runner on sys.path).
    probes = notebooks._literal("def grader_only(module):\n    import gpulab_grader_only_module\n")
    harness = notebooks._HARNESS.format(probes=probes, params=repr({"n": 3}))
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(harness, "<harness>", "exec"), namespace)  # noqa: S102
        namespace["gpulab_examples"]("test_x.py", (
            "def test_probe(probe):\n    probe('grader_only')\n\n\ndef test_fixture(capsys):\n    pass\n\n\n"
            "def test_plain(submission):\n    assert submission.add(1, 2) == 3\n\n\n"
            "def test_variant(params):\n    assert params == {'n': 3}\n"
        ))  # fmt: skip
    out = printed.getvalue()
    assert "SKIP test_probe: No module named 'gpulab_grader_only_module'" in out
    assert "SKIP test_fixture: needs capsys, which only gpulab's grader provides" in out
    assert "PASS test_plain" in out and "PASS test_variant" in out and "test_x.py: 2 passed, 0 failed" in out
