"""The deadline-hour model of ``benchmarks/capacity.py``: arrivals as asked, queues that grow only when they must."""

from __future__ import annotations

import random

import pytest

from benchmarks.capacity import API_SHARE_S, Cost, Scenario, arrivals, costs_from_run, lognormal, pct, simulate

COSTS = {
    "warm": {"python": Cost(0.2, 0.25, 0.7), "torch": Cost(0.3, 0.35, 4.5)},
    "cold": {"python": Cost(0.5, 0.6, 0.7), "torch": Cost(2.0, 2.2, 3.3)},
}
MIX = ["python", "torch"]


def test_arrivals_climb_to_the_peak_rate() -> None:
    times = list(arrivals(Scenario(nodes=1, start_per_min=60, peak_per_min=300, ramp_min=30, hour_min=60),
                          random.Random(3)))  # fmt: skip
    first, last = sum(1 for t in times if t < 300), sum(1 for t in times if t >= 3300)
    assert 250 < first < 450 and 1300 < last < 1700  # ~70/min in the first 5 min, 300/min in the last 5
    assert times == sorted(times) and times[-1] < 3600


def test_lognormal_has_the_median_and_p95_asked_for() -> None:
    mu, sigma = lognormal(0.3, 0.6)
    rng = random.Random(5)
    draws = [rng.lognormvariate(mu, sigma) for _ in range(20_000)]
    assert abs(pct(draws, 50) - 0.3) < 0.01 and abs(pct(draws, 95) - 0.6) < 0.03


def test_enough_cores_mean_no_wait_and_too_few_a_backlog() -> None:
    short = {"peak_per_min": 120.0, "start_per_min": 120.0, "ramp_min": 0.0, "hour_min": 10.0}
    ample = simulate(Scenario(nodes=4, slots=8, **short), MIX, COSTS)  # ~5 core-s per job of 2 kinds, 2/s
    assert ample.wait_p95_s < 0.5 and ample.waiting_at_end < 20 and 0.1 < ample.cpu_utilisation < 0.5
    assert ample.verdict_p50_s < 0.5  # the warm path's latency, not its warm-up, is what a learner waits for
    scarce = simulate(Scenario(nodes=1, slots=2, **short), MIX, COSTS)
    assert scarce.wait_p95_s > 60 and scarce.waiting_at_end > 100 and scarce.cpu_utilisation > 0.95
    assert scarce.submissions == ample.submissions  # none lost: the queue drains after the hour


def test_the_cold_path_is_slower_per_verdict_but_cheaper_per_core() -> None:
    short = {"peak_per_min": 120.0, "start_per_min": 120.0, "ramp_min": 0.0, "hour_min": 10.0}
    warm = simulate(Scenario(nodes=4, slots=8, path="warm", **short), MIX, COSTS)
    cold = simulate(Scenario(nodes=4, slots=8, path="cold", **short), MIX, COSTS)
    assert warm.verdict_p50_s < cold.verdict_p50_s
    assert warm.cpu_utilisation > cold.cpu_utilisation


def test_costs_from_a_run_are_its_latency_less_the_api_and_its_cores_over_its_rate() -> None:
    run = {"machine": {"cores": 2}, "compose": {
        "latency": {"torch": {"p50_s": 0.33, "p95_s": 0.43}, "peak_memory_mb_per_job": {"median": 20}},
        "throughput_torch": {"per_s": 4.0}}}  # fmt: skip
    costs = costs_from_run(run, "compose", COSTS["cold"])
    assert costs["cold"] == COSTS["cold"]
    torch = costs["warm"]["torch"]
    assert list(costs["warm"]) == ["torch"] and torch.core_s == 0.5
    assert (
        abs(torch.latency_p50_s - (0.33 - API_SHARE_S)) < 1e-9
        and abs(torch.latency_p95_s - (0.43 - API_SHARE_S)) < 1e-9
    )
    del run["compose"]["throughput_torch"]
    with pytest.raises(ValueError, match="no throughput_torch for compose"):
        costs_from_run(run, "compose", COSTS["cold"])
