"""What grading produces: one verdict enum and the outcome objects shared by worker, CLI and app.

Contract:
- ``Verdict`` is the only verdict vocabulary in gpulab. ``passed``..``crashed`` are the learner's outcomes;
  ``internal_error`` is the platform's and the only one that is retried.
- ``GradeOutcome.to_json()`` is the object ``gpulab grade --json`` prints and the API embeds.
"""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any


class Verdict(enum.StrEnum):
    passed = "passed"
    failed = "failed"
    timeout = "timeout"
    memory_limit = "memory_limit"
    crashed = "crashed"
    internal_error = "internal_error"

    @property
    def is_platform_error(self) -> bool:
        """Say whether the platform, not the learner, caused this verdict."""
        return self is Verdict.internal_error


class TestOutcomeKind(enum.StrEnum):
    __test__ = False  # not a pytest test class
    passed = "passed"
    failed = "failed"
    error = "error"
    skipped = "skipped"


@dataclass(frozen=True)
class TestOutcome:
    __test__ = False  # not a pytest test class
    name: str
    outcome: TestOutcomeKind
    message: str
    points: float
    max_points: float
    details: str = ""  # the framework's own words behind ``message`` (a learner may open them)


@dataclass
class GradeOutcome:
    verdict: Verdict
    score: float
    max_score: float
    tests: list[TestOutcome] = field(default_factory=list)
    stdout: str = ""
    stderr: str = ""
    runtime_ms: int = 0
    device: str = ""
    sandbox: str = ""
    message: str = ""
    # What hidden tests measured (runner/measure.py): name, value, unit, target, met, modelled, basis, chart.
    measurements: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Return the plain-JSON form printed by ``gpulab grade --json``."""
        data = asdict(self)
        data["verdict"] = self.verdict.value
        data["tests"] = [{**asdict(t), "outcome": t.outcome.value} for t in self.tests]
        return data
