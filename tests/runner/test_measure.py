"""Measured outcomes in the judge: the ``measure`` fixture, partial credit, the cost model (runner/measure.py,
runner/costmodel.py), and the measurements in ``result.json`` as the host reads them back."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.runner.test_runner import by_id, make_job, run_runner
from worker.grading.jobdir import read_result
from worker.runner import costmodel
from worker.runner.measure import credit, met

MEASURED_TESTS = {
    "test_measured.py": """
        def test_within_budget(submission, measure):
            sent = submission.bytes_sent()
            measure.grade("bytes per step", sent, unit="B", target=200, zero_at=800,
                          message=f"sent {sent} bytes per step; the budget is 200")

        def test_exact_calls(submission, measure):
            measure.grade("calls per step", submission.calls(), unit="calls", target=1, compare="==", zero_at=4,
                          message="one all-reduce per step")

        def test_modelled_and_chart(measure):
            measure.record("modelled step time", 2.5, unit="ms", modelled=True, basis="compute measured + link model",
                           chart={"kind": "line", "x_label": "ranks", "y_label": "speed-up",
                                  "series": [{"label": "PCIe-class", "points": [[1, 1.0], [2, 1.9]]}]})
    """
}


def _run(tmp_path: Path, sent: float, calls: float) -> dict:
    code = f"def bytes_sent():\n    return {sent}\n\ndef calls():\n    return {calls}\n"
    proc, result = run_runner(make_job(tmp_path, code, MEASURED_TESTS))
    assert proc.returncode == 0, proc.stderr
    assert result is not None and result["error"] is None, result
    return result


def test_measurements_travel_in_result_json_with_partial_credit(tmp_path: Path) -> None:
    result = _run(tmp_path, sent=500, calls=0.5)
    tests = by_id(result)
    budget = tests["test_measured.py::test_within_budget"]
    # 500 bytes against a target of 200 falling to nothing at 800: (800 - 500) / (800 - 200) = 0.5.
    assert budget["outcome"] == "failed" and budget["credit"] == 0.5
    assert budget["message"] == "sent 500 bytes per step; the budget is 200"
    calls = tests["test_measured.py::test_exact_calls"]
    assert calls["outcome"] == "failed" and "credit" not in calls, "below an == target is the wrong side: no share"
    assert tests["test_measured.py::test_modelled_and_chart"]["outcome"] == "passed"
    found = {m["name"]: m for m in result["measurements"]}
    assert found["bytes per step"] == {
        "test": "test_measured.py::test_within_budget", "name": "bytes per step", "value": 500.0, "unit": "B",
        "target": 200.0, "compare": "<=", "met": False, "modelled": False, "basis": "", "chart": None,
    }  # fmt: skip
    assert found["modelled step time"]["modelled"] is True
    assert found["modelled step time"]["chart"]["series"][0]["points"] == [[1.0, 1.0], [2.0, 1.9]]
    # The host's reader accepts exactly what the judge wrote.
    assert read_result(tmp_path / "job" / "out") == result


def test_a_miss_by_a_hair_keeps_a_credit_the_host_accepts(tmp_path: Path) -> None:
    # (800 - 200.0001) / 600 rounds to 1.0 at four places: the judge keeps it below 1, or the host refuses the
    # whole result.json and the learner read "Your program exited ... before the tests could report".
    result = _run(tmp_path, sent=200.0001, calls=1)
    budget = by_id(result)["test_measured.py::test_within_budget"]
    assert budget["outcome"] == "failed" and budget["credit"] == 0.9999
    assert read_result(tmp_path / "job" / "out") == result


def test_met_targets_pass_without_credit_keys(tmp_path: Path) -> None:
    result = _run(tmp_path, sent=200, calls=1)
    tests = by_id(result)
    assert tests["test_measured.py::test_within_budget"] == {
        "id": "test_measured.py::test_within_budget", "outcome": "passed", "message": "",
        "duration_ms": tests["test_measured.py::test_within_budget"]["duration_ms"],
    }  # fmt: skip
    assert all(m["met"] in (True, None) for m in result["measurements"])


def test_modelled_figure_without_basis_is_the_tests_error(tmp_path: Path) -> None:
    tests = {"test_m.py": "def test_m(measure):\n    measure.record('speed-up', 1.5, modelled=True)\n"}
    _, result = run_runner(make_job(tmp_path, "x = 1\n", tests))
    assert result is not None
    entry = by_id(result)["test_m.py::test_m"]
    assert entry["outcome"] == "failed" and "could not run to the end" in entry["message"], entry
    assert "ValueError: a modelled figure needs its basis" in entry["details"], entry  # the raw text stays behind
    assert "measurements" not in result, "a modelled figure is never stored without its basis"


@pytest.mark.parametrize(
    ("value", "target", "compare", "zero_at", "share"),
    [
        (150, 200, "<=", 800, 1.0),
        (800, 200, "<=", 800, 0.0),
        (350, 200, "<=", 800, 0.75),
        (900, 200, "<=", 800, 0.0),
        (0.5, 0.9, ">=", 0.5, 0.0),
        (0.8, 0.9, ">=", 0.5, 0.75),
        (2.0, 1.0, "==", 4.0, 2 / 3),
        (0.0, 1.0, "==", 4.0, 0.0),
        (350, 200, "<=", None, 0.0),
    ],
)
def test_credit_is_linear_from_target_to_zero_at(
    value: float, target: float, compare: str, zero_at: float | None, share: float
) -> None:
    assert math.isclose(credit(value, target, compare, zero_at), share)


def test_met_compares_and_knows_when_there_is_nothing_to_compare() -> None:
    assert met(1.0, 1.0, "==") and met(1, 2, "<=") and not met(3, 2, "<=") and met(3, 2, ">=")
    assert met(None, 2, "<=") is None and met(2, None, "<=") is None


def test_cost_model_against_hand_computed_figures() -> None:
    link = costmodel.Link("test", bandwidth_bytes_s=1e9, latency_s=1e-5)
    # 2 ranks: 2 hops of 10 µs, plus 2 * 1 / 2 = 1 payload of 1e6 bytes at 1e9 B/s = 1 ms.
    assert math.isclose(costmodel.allreduce_s(1e6, 2, link), 2e-5 + 1e-3)
    # 4 ranks, 3 calls: 3 * 6 hops of 10 µs, plus 6 / 4 * 1e6 / 1e9.
    assert math.isclose(costmodel.allreduce_s(1e6, 4, link, calls=3), 18e-5 + 1.5e-3)
    assert costmodel.allreduce_s(1e6, 1, link) == 0.0
    curve = costmodel.speedup(4e-3, 1e6, 1, [1, 2], link)
    assert curve[0] == (1, 1.0)
    assert math.isclose(curve[1][1], 4e-3 / (2e-3 + 2e-5 + 1e-3))
    assert "GB/s" in costmodel.PCIE.describe() and costmodel.NVLINK.bandwidth_bytes_s > costmodel.PCIE.bandwidth_bytes_s
