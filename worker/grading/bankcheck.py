"""Prove an exercise bank grades as its author intends, through the real sandbox.

Contract: for every code exercise, ``solution.py`` and each ``right/*.py`` must pass with full marks, and
each ``wrong/*.py`` must not pass, must fail every test its ``[[wrong]]`` entry names, and, when the entry declares
``feedback``, one of those tests' failure messages must contain it (the message names the variant's mistake). Each
mismatch is one human-readable problem in the returned list (empty means the bank checks out).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from worker.bank.spec import ExerciseSpec, WrongVariant, load_bank
from worker.core.outcome import GradeOutcome, TestOutcome, Verdict
from worker.grading.pipeline import grade
from worker.grading.sandbox.base import Sandbox


def _summary(outcome: GradeOutcome) -> str:
    failed = [t.name for t in outcome.tests if t.outcome.value != "passed"]
    detail = f" failing {', '.join(failed)}" if failed else ""
    extra = f" ({outcome.message})" if outcome.message else ""
    return f"{outcome.verdict.value} {outcome.score:g}/{outcome.max_score:g}{detail}{extra}"


def feedback_problem(variant: WrongVariant, tests: Sequence[TestOutcome]) -> str | None:
    """Return why the variant's failing ``must_fail`` messages lack its ``feedback`` fragment, or None if one has it."""
    if not variant.feedback:
        return None
    failed = [t for t in tests if t.name in variant.must_fail and t.outcome.value != "passed"]
    if any(variant.feedback in t.message for t in failed):
        return None
    read = "; ".join(f"{t.name}: {' '.join(t.message.split())[:300]!r}" for t in failed) or "no message"
    return f"no failure message of its must_fail tests contains its feedback {variant.feedback!r} ({read})"


def check_exercise(spec: ExerciseSpec, *, sandbox: Sandbox, echo: Callable[[str], None]) -> list[str]:
    """Grade the reference, alternatives and wrong variants of one exercise; return the problems."""
    problems: list[str] = []
    if spec.kind != "code":
        return problems
    must_pass = {"solution.py": spec.solution, **spec.right_solutions}
    for path, code in must_pass.items():
        outcome = grade(spec, code, sandbox=sandbox)
        ok = outcome.verdict is Verdict.passed and outcome.score == spec.max_score
        echo(f"  {'ok ' if ok else 'BAD'} {spec.slug}/{path}: {_summary(outcome)}")
        if not ok:
            problems.append(f"{spec.slug}/{path} should pass with full marks but got {_summary(outcome)}")
    for variant in spec.wrong:
        outcome = grade(spec, spec.files[variant.path], sandbox=sandbox)
        passed_ids = {t.name for t in outcome.tests if t.outcome.value == "passed"}
        not_failed = [test_id for test_id in variant.must_fail if test_id in passed_ids]
        ok = outcome.verdict is not Verdict.passed and not not_failed
        if outcome.verdict is Verdict.internal_error:
            ok = False
        unsaid = feedback_problem(variant, outcome.tests) if ok else None
        note = "" if variant.feedback else " [no feedback fragment declared: its message is not checked]"
        echo(f"  {'ok ' if ok and not unsaid else 'BAD'} {spec.slug}/{variant.path}: {_summary(outcome)}{note}")
        if not ok:
            reason = f"passes {', '.join(not_failed)}" if not_failed else _summary(outcome)
            problems.append(f"{spec.slug}/{variant.path} must fail {', '.join(variant.must_fail)} but {reason}")
        elif unsaid:
            problems.append(f"{spec.slug}/{variant.path}: {unsaid}")
    return problems


def check_bank(root: Path, slugs: Sequence[str], *, sandbox: Sandbox, echo: Callable[[str], None]) -> list[str]:
    """Check the named exercises (all when ``slugs`` is empty)."""
    specs = load_bank(root)
    known = {s.slug for s in specs}
    problems = [f"no exercise called {slug!r} in {root}" for slug in slugs if slug not in known]
    for spec in specs:
        if slugs and spec.slug not in slugs:
            continue
        echo(f"{spec.slug} (version {spec.content_hash[:8]}, {len(spec.tests)} tests):")
        problems.extend(check_exercise(spec, sandbox=sandbox, echo=echo))
    return problems
