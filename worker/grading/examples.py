"""Grade code against an exercise's visible example tests instead of its hidden ones.

Contract: ``run_examples(spec, code, sandbox=...)`` rebuilds the spec with ``ExerciseSpec.from_files`` from a
copy of ``spec.files`` in which ``examples/*`` take the place of ``tests/*``; ``[points]``, ``[[wrong]]`` and
``[leaderboard]`` (which name hidden tests or what they measure) are dropped from ``exercise.toml`` (written back by
``worker.bank.folders.dump_exercise_toml``) together with ``wrong/`` and ``right/``, so every example test is
worth 1 point. It grades with ``worker.grading.pipeline.grade`` and returns the outcome; nothing is
stored. An exercise without example tests raises ``ExerciseFormatError``.
"""

from __future__ import annotations

import tomllib

from worker.bank.folders import dump_exercise_toml
from worker.bank.spec import ExerciseSpec
from worker.core.errors import ExerciseFormatError
from worker.core.outcome import GradeOutcome
from worker.grading.pipeline import grade
from worker.grading.sandbox.base import Sandbox

HIDDEN_ONLY_KEYS = ("points", "wrong", "leaderboard")
HIDDEN_ONLY_DIRS = ("tests/", "wrong/", "right/")


def examples_files(spec: ExerciseSpec) -> dict[str, str]:
    """Return the exercise's files with the examples as its only tests."""
    meta = tomllib.loads(spec.files["exercise.toml"])
    kept = {k: v for k, v in meta.items() if k not in HIDDEN_ONLY_KEYS}
    files = {p: c for p, c in spec.files.items() if not p.startswith(HIDDEN_ONLY_DIRS)}
    files["exercise.toml"] = dump_exercise_toml(kept)
    files.update({"tests/" + name: source for name, source in spec.example_test_files.items()})
    return files


def run_examples(
    spec: ExerciseSpec, code: str, *, sandbox: Sandbox, params: dict[str, int | float | str] | None = None
) -> GradeOutcome:
    """Grade ``code`` against the example tests of ``spec`` in ``sandbox`` (``params``: the learner's variant)."""
    if not spec.example_test_files:
        raise ExerciseFormatError(spec.slug, "this exercise has no example tests")
    return grade(ExerciseSpec.from_files(spec.slug, examples_files(spec)), code, sandbox=sandbox, params=params)
