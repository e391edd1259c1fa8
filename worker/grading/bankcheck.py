"""Prove an exercise bank grades as its author intends, through the real sandbox.

Contract: for every code exercise, ``solution.py`` and each ``right/*.py`` must pass with full marks, and
each ``wrong/*.py`` must not pass, must fail every test its ``[[wrong]]`` entry names, and, when the entry declares
``feedback``, one of those tests' failure messages must contain it (the message names the variant's mistake). No
failing test's message of any variant may show internals (``runner.feedback.internals``: pytest's introspection, a
traceback, a library's own text): the message is the test author's sentence, the framework's words go to details. Each
mismatch is one human-readable problem in the returned list (empty means the bank checks out). An exercise with
parameters is checked in several variants (``ExerciseData.check_params``: the default and two drawn, or every one
when there are few): each file is rendered for the variant (its ``{{ params.NAME }}`` filled in) and graded with it.
``variants(spec)`` lists what is graded and ``check_variant`` grades one and judges it: ``check_exercise``
(``gpulab exercises check``, instructor checks) and ``scripts/gpu-check`` share them. Only ``check_bank`` reads
a bank folder with the format's checks (pydantic); the rest runs on the standard library.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from worker.bank.specdata import ExerciseData
from worker.core.outcome import GradeOutcome, TestOutcome, Verdict
from worker.grading.pipeline import grade
from worker.grading.sandbox.base import Sandbox


@dataclass(frozen=True)
class Variant:
    """One file to grade: its path in the exercise folder, and ``must_fail`` (``None``: it must pass).

    ``params``: the exercise variant it is rendered for and graded in (``{}`` without parameters).
    """

    path: str
    code: str
    must_fail: tuple[str, ...] | None = None
    params: dict[str, int | float | str] = field(default_factory=dict)
    feedback: str = ""  # a wrong variant's: text one of its must_fail messages must contain

    @property
    def label(self) -> str:
        """Return the path, with the variant's values when there are any: ``solution.py [batch=32, replicas=2]``."""
        if not self.params:
            return self.path
        return f"{self.path} [{', '.join(f'{k}={v!r}' for k, v in self.params.items())}]"


@dataclass(frozen=True)
class VariantCheck:
    """A graded variant: what grading said, and the problem (``None`` when the verdict is as intended)."""

    variant: Variant
    outcome: GradeOutcome
    problem: str | None

    @property
    def ok(self) -> bool:
        return self.problem is None


def summary(outcome: GradeOutcome) -> str:
    """Return the verdict, score and failing tests of ``outcome`` on one line."""
    failed = [t.name for t in outcome.tests if t.outcome.value != "passed"]
    detail = f" failing {', '.join(failed)}" if failed else ""
    extra = f" ({outcome.message})" if outcome.message else ""
    return f"{outcome.verdict.value} {outcome.score:g}/{outcome.max_score:g}{detail}{extra}"


def variants(spec: ExerciseData, *, in_params: list[dict[str, int | float | str]] | None = None) -> list[Variant]:
    """Return the reference solution, the right alternatives and the wrong variants, in each checked variant.

    ``in_params``: the exercise variants to render them for (default: ``spec.check_params()``).
    """
    if spec.kind != "code":
        return []
    must_pass = ["solution.py", *spec.right_solutions]
    found: list[Variant] = []
    for params in spec.check_params() if in_params is None else in_params:
        found.extend(Variant(path, spec.rendered(path, params), params=params) for path in must_pass)
        found.extend(
            Variant(w.path, spec.rendered(w.path, params), tuple(w.must_fail), params, w.feedback) for w in spec.wrong
        )
    return found


def feedback_problem(variant: Variant, tests: Sequence[TestOutcome]) -> str | None:
    """Return why the variant's failing ``must_fail`` messages lack its ``feedback`` fragment, or None if one has it."""
    if not variant.feedback or variant.must_fail is None:
        return None
    failed = [t for t in tests if t.name in variant.must_fail and t.outcome.value != "passed"]
    if any(variant.feedback in t.message for t in failed):
        return None
    read = "; ".join(f"{t.name}: {' '.join(t.message.split())[:300]!r}" for t in failed) or "no message"
    return f"no failure message of its must_fail tests contains its feedback {variant.feedback!r} ({read})"


def hygiene_problem(tests: Sequence[TestOutcome]) -> str | None:
    """Return which failing tests' messages show internals a learner should never read, or None if none do."""
    # Here, not at the top: the runner's feedback module imports pytest, which a bare GPU machine's
    # scripts/gpu-check path (this module's importer) does not have.
    from worker.runner.feedback import internals

    shown = []
    for test in tests:
        if test.outcome.value == "passed":
            continue
        found = internals(test.message)
        if found:
            shown.append(f"{test.name} shows {', '.join(found)}: {' '.join(test.message.split())[:300]!r}")
    return ("its messages show internals: " + "; ".join(shown)) if shown else None


def check_variant(
    spec: ExerciseData, variant: Variant, *, sandbox: Sandbox, gpus: tuple[str, ...] = ()
) -> VariantCheck:
    """Grade one variant and say whether its verdict is the one its place in the folder promises."""
    outcome = grade(spec, variant.code, sandbox=sandbox, gpus=gpus, params=variant.params)
    where = f"{spec.slug}/{variant.label}"
    if variant.must_fail is None:
        ok = outcome.verdict is Verdict.passed and outcome.score == spec.max_score
        problem = None if ok else f"{where} should pass with full marks but got {summary(outcome)}"
        return VariantCheck(variant, outcome, problem)
    passed_ids = {t.name for t in outcome.tests if t.outcome.value == "passed"}
    not_failed = [test_id for test_id in variant.must_fail if test_id in passed_ids]
    ok = outcome.verdict not in (Verdict.passed, Verdict.internal_error) and not not_failed
    reason = f"passes {', '.join(not_failed)}" if not_failed else summary(outcome)
    problem = None if ok else f"{where} must fail {', '.join(variant.must_fail)} but {reason}"
    unsaid = (feedback_problem(variant, outcome.tests) or hygiene_problem(outcome.tests)) if ok else None
    if unsaid:
        problem = f"{where}: {unsaid}"
    return VariantCheck(variant, outcome, problem)


def check_exercise(spec: ExerciseData, *, sandbox: Sandbox, echo: Callable[[str], None], jobs: int = 1) -> list[str]:
    """Grade the reference, alternatives and wrong variants of one exercise; return the problems.

    ``jobs``: how many variants grade at once (a sandbox serves concurrent jobs, as a worker's does); the lines
    and problems come in the variants' order whatever finishes first.
    """
    problems: list[str] = []
    found = variants(spec)
    with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="gpulab-bankcheck") as pool:
        checks = pool.map(lambda v: check_variant(spec, v, sandbox=sandbox), found)
        for variant, check in zip(found, checks, strict=True):
            problems.extend(_report(spec, variant, check, echo))
    return problems


def _report(spec: ExerciseData, variant: Variant, check: VariantCheck, echo: Callable[[str], None]) -> list[str]:
    """Echo one graded variant's line; return its problem, if any, as a list."""
    unchecked = variant.must_fail is not None and not variant.feedback
    note = " [no feedback fragment declared: its message is not checked]" if unchecked else ""
    echo(f"  {'ok ' if check.ok else 'BAD'} {spec.slug}/{variant.label}: {summary(check.outcome)}{note}")
    return [] if check.problem is None else [check.problem]


def check_bank(
    root: Path, slugs: Sequence[str], *, sandbox: Sandbox, echo: Callable[[str], None], jobs: int = 1
) -> list[str]:
    """Check the named exercises (all when ``slugs`` is empty)."""
    # Imported here, not above: reading a bank checks its format with pydantic, which the rest of this module
    # (used by scripts/gpu-check on a bare GPU machine) must not need.
    from worker.bank.learning_path import load_path
    from worker.bank.spec import load_bank
    from worker.core.errors import PathFormatError

    specs = load_bank(root)
    known = {s.slug for s in specs}
    problems = [f"no exercise called {slug!r} in {root}" for slug in slugs if slug not in known]
    try:
        load_path(root, known)  # the learning path must place every exercise, as the sync will require
    except PathFormatError as exc:
        problems.append(exc.message)
    for spec in specs:
        if slugs and spec.slug not in slugs:
            continue
        echo(f"{spec.slug} (version {spec.content_hash[:8]}, {len(spec.tests)} tests):")
        problems.extend(check_exercise(spec, sandbox=sandbox, echo=echo, jobs=jobs))
    return problems
