"""Measured outcomes: what a hidden test measured about the learner's run, its target, and partial credit.

Contract (judge side; the host re-validates everything in ``worker/grading/jobdir.py``):
- A hidden test takes the ``measure`` fixture (``runner.plugin``) and calls
  ``measure.record(name, value, unit=..., target=..., compare=..., modelled=..., basis=..., chart=...)``: the
  measurement goes into ``result.json`` under ``measurements`` with the test's id, and the result page shows it
  next to its target. ``measure.grade(...)`` records the same way and, when the target is missed, fails the
  test with ``message`` and earns it partial credit: full at the target, falling linearly to none at
  ``zero_at`` (none at all without it). The test's ``credit`` (0 < credit < 1) travels in ``result.json``.
- ``modelled=True`` marks a figure that comes from a model, not a measurement (``runner.costmodel``); the
  result page always labels it "modelled" and shows its ``basis``.
- ``chart`` is optional: ``{"kind": "bar"|"line", "x_label", "y_label", "series": [{"label", "points":
  [[x, y], ...]}]}``, at most 4 series of 64 points.
- Everything is plain JSON (numbers, short strings); sizes are capped here and again on the host. Values come
  from probes, which run next to the learner's code: a measurement is an observation the learner could forge,
  like every probe's (``worker/runner/README.md``, Limits).
"""

from __future__ import annotations

import math
from typing import Any

import pytest

MAX_MEASUREMENTS = 64
MAX_NAME = 120
MAX_UNIT = 24
MAX_BASIS = 400
MAX_SERIES = 4
MAX_POINTS = 64
COMPARES = ("<=", ">=", "==")
CHART_KINDS = ("bar", "line")


def _number(value: Any, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number, not {value!r}")
    return float(value)


def _text(value: Any, what: str, cap: int) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string")
    return value.strip()[:cap]


def _chart(chart: Any) -> dict[str, Any] | None:
    if chart is None:
        return None
    if not isinstance(chart, dict) or chart.get("kind") not in CHART_KINDS:
        raise ValueError(f"chart must be a dict with kind in {CHART_KINDS}")
    series = chart.get("series")
    if not isinstance(series, list) or not 0 < len(series) <= MAX_SERIES:
        raise ValueError(f"chart.series must hold 1 to {MAX_SERIES} series")
    out = []
    for s in series:
        points = s.get("points") if isinstance(s, dict) else None
        if not isinstance(points, list) or not 0 < len(points) <= MAX_POINTS:
            raise ValueError(f"each chart series needs 1 to {MAX_POINTS} points")
        out.append(
            {
                "label": _text(s.get("label", ""), "series label", MAX_NAME),
                "points": [[_number(x, "x"), _number(y, "y")] for x, y in points],
            }
        )
    return {
        "kind": chart["kind"],
        "x_label": _text(chart.get("x_label", ""), "x_label", MAX_NAME),
        "y_label": _text(chart.get("y_label", ""), "y_label", MAX_NAME),
        "series": out,
    }


def met(value: float | None, target: float | None, compare: str) -> bool | None:
    """Say whether ``value`` meets ``target`` under ``compare``; ``None`` when there is nothing to compare."""
    if value is None or target is None:
        return None
    if compare == "<=":
        return value <= target
    if compare == ">=":
        return value >= target
    return math.isclose(value, target, rel_tol=1e-9, abs_tol=1e-12)


def credit(value: float, target: float, compare: str, zero_at: float | None) -> float:
    """Return the share of the points earned: 1 at the target, linear down to 0 at ``zero_at`` (0 without it).

    Only a miss on ``zero_at``'s side of the target earns a share: with ``compare="=="`` and ``zero_at`` above
    the target, a value below it earns nothing.
    """
    if met(value, target, compare):
        return 1.0
    if zero_at is None or zero_at == target or (value - target) * (zero_at - target) <= 0:
        return 0.0
    share = (zero_at - value) / (zero_at - target)
    return max(0.0, min(1.0, share))


class Recorder:
    """The ``measure`` fixture: records measurements for the running test (see the module docstring)."""

    def __init__(self, sink: list[dict[str, Any]], credits: dict[str, float], test_id: str) -> None:
        self._sink = sink
        self._credits = credits
        self.test_id = test_id

    def record(
        self,
        name: str,
        value: float | None,
        *,
        unit: str = "",
        target: float | None = None,
        compare: str = "<=",
        modelled: bool = False,
        basis: str = "",
        chart: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Record one measurement of this test; return it as stored."""
        if compare not in COMPARES:
            raise ValueError(f"compare must be one of {COMPARES}")
        if modelled and not basis:
            raise ValueError("a modelled figure needs its basis (what was measured, what was assumed)")
        value_f, target_f = _number(value, "value"), _number(target, "target")
        entry = {
            "test": self.test_id,
            "name": _text(name, "name", MAX_NAME),
            "value": value_f,
            "unit": _text(unit, "unit", MAX_UNIT),
            "target": target_f,
            "compare": compare if target_f is not None else None,
            "met": met(value_f, target_f, compare),
            "modelled": bool(modelled),
            "basis": _text(basis, "basis", MAX_BASIS),
            "chart": _chart(chart),
        }
        if len(self._sink) < MAX_MEASUREMENTS:
            self._sink.append(entry)
        return entry

    def grade(
        self,
        name: str,
        value: float,
        *,
        target: float,
        compare: str = "<=",
        zero_at: float | None = None,
        message: str,
        unit: str = "",
        modelled: bool = False,
        basis: str = "",
        chart: dict[str, Any] | None = None,
    ) -> None:
        """Record ``value`` against ``target``; when it misses, fail with ``message`` and earn partial credit."""
        entry = self.record(
            name, value, unit=unit, target=target, compare=compare, modelled=modelled, basis=basis, chart=chart
        )
        if entry["met"]:
            return
        share = credit(float(value), float(target), compare, zero_at)
        self._credits[self.test_id] = min(share, self._credits.get(self.test_id, 1.0))
        pytest.fail(message, pytrace=False)
