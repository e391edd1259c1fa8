"""Size a course's deadline hour on paper: ``.venv/bin/python -m benchmarks.capacity [--costs F] [--out F]``.

``--from-run RUN.json --mode MODE`` takes the CPU jobs' costs from a ``python -m benchmarks`` run instead
(``costs_from_run``): a mode's submit-to-verdict p50/p95 less ``API_SHARE_S`` for the latency, and
cores / gradings per second with the queue kept full (``throughput_<kind>``) for the core-seconds; GPU jobs keep
``--costs``' cold costs.

A discrete-event simulation (simpy) of the grading queues in the hour before a deadline, from measured per-job
costs; it writes the tables of ``docs/capacity.md`` as JSON (and prints them).

Model (every number is a parameter; the defaults are this repository's measurements, ``docs/benchmarks.md``):
- Arrivals: a Poisson process whose rate climbs linearly from ``start_per_min`` to ``peak_per_min`` over
  the first ``ramp_min`` minutes of the hour and stays at the peak for the rest (for 10,000 learners, 50 to 300
  submissions a minute: ~12,400 submissions in the hour).
- Each submission is a code exercise of the bank, all equally likely (quizzes are graded in the request and
  never queue), so the bank's mix of plain Python, torch and TensorFlow exercises is the job mix. A share
  ``gpu_share`` of them needs a real GPU (the bank has none today: its multi-device exercises run on virtual
  devices) and goes to the GPU queue.
- Per job, from ``benchmarks.docker_paths`` (``docs/docker_paths.json``) for its framework and path (``warm``
  docker pairs or ``cold`` fresh containers): its grading latency, log-normal with the measured median and
  p95, plus ``API_SHARE_S`` outside the grading; and the core-seconds it costs the node, which on the warm
  path include its replacement pair's warm-up (work moved off the submission's critical path, not off the
  node). A job takes one core of its node and holds it for its core-seconds; its verdict comes once its
  latency is over. So a node's throughput is its cores over the jobs' core-seconds.
- Nodes: ``nodes`` grading machines of ``slots`` cores each, as many CPU gradings at once
  (``GPULAB_GRADING_WORKERS`` = cores: the bank's ``cpus = 1``) and ``gpus`` GPU gradings at once (one GPU per job,
  ``GPULAB_GPUS_PER_JOB=1``; GPU jobs run in fresh containers, at the cold path's costs). All nodes take
  from one FIFO queue per kind (Celery with prefetch 1), so the
  system is an M(t)/G/c queue with c = nodes x slots (and one with c = nodes x gpus); warm-ups queue for the
  same cores, behind the jobs already waiting.
- Output per configuration: how long a submission waits for a slot and its submit-to-verdict time (p50, p95,
  max), the slots' utilisation, and how many submissions were still waiting when the hour ended.
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections.abc import Generator, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import simpy

from benchmarks.common import REPO, pct

Z95 = 1.6449  # the standard normal's 95th percentile

COSTS_FILE = REPO / "docs" / "docker_paths.json"  # written by ``python -m benchmarks.docker_paths``
API_SHARE_S = 0.03  # what a submission spends outside the grading slot: the API, Redis and the worker's pick-up


@dataclass(frozen=True)
class Cost:
    """One job of one framework on one path: its grading latency (median, p95) and the core-seconds it costs."""

    latency_p50_s: float
    latency_p95_s: float
    core_s: float


def measured_costs(path: Path = COSTS_FILE) -> dict[str, dict[str, Cost]]:
    """Read ``benchmarks.docker_paths``' results: {path: {framework: Cost}}."""
    data = json.loads(path.read_text())
    return {
        mode: {
            kind: Cost(row[mode]["latency_p50_s"], row[mode]["latency_p95_s"], row[mode]["core_s_median"])
            for kind, row in data.items()
            if isinstance(row, dict) and mode in row
        }
        for mode in ("warm", "cold")
    }


def costs_from_run(run: dict[str, Any], mode: str, cold: dict[str, Cost]) -> dict[str, dict[str, Cost]]:
    """Return {"warm": the CPU costs ``mode`` measured in ``run``, "cold": ``cold``}; see the module docstring."""
    cores = run["machine"]["cores"]
    measured = run[mode]
    warm = {}
    for kind, latency in measured["latency"].items():
        if not isinstance(latency, dict) or "p50_s" not in latency:
            continue  # peak memory and other summaries beside the kinds
        rate = measured.get(f"throughput_{kind}")
        if rate is None:
            raise ValueError(f"the run has no throughput_{kind} for {mode}: rerun with --throughput {kind}")
        warm[kind] = Cost(max(0.001, latency["p50_s"] - API_SHARE_S), max(0.001, latency["p95_s"] - API_SHARE_S),
                          cores / rate["per_s"])  # fmt: skip
    return {"warm": warm, "cold": cold}


@dataclass(frozen=True)
class Scenario:
    """One deadline hour on one grading fleet."""

    nodes: int
    slots: int = 8
    gpus: int = 0
    gpu_share: float = 0.0
    path: str = "warm"
    start_per_min: float = 50.0
    peak_per_min: float = 300.0
    ramp_min: float = 45.0
    hour_min: float = 60.0
    seed: int = 1


@dataclass
class Outcome:
    scenario: Scenario
    submissions: int = 0
    wait_p50_s: float = 0.0
    wait_p95_s: float = 0.0
    wait_max_s: float = 0.0
    verdict_p50_s: float = 0.0
    verdict_p95_s: float = 0.0
    cpu_utilisation: float = 0.0
    gpu_utilisation: float = 0.0
    waiting_at_end: int = 0
    per_kind_p95_s: dict[str, float] = field(default_factory=dict)


def bank_mix() -> list[str]:
    """Return the framework of each code exercise of the bank (the job mix)."""
    from worker.bank.spec import load_bank

    return [spec.framework for spec in load_bank(REPO / "exercises") if spec.kind == "code"]


def lognormal(median_s: float, p95_s: float) -> tuple[float, float]:
    """Return (mu, sigma) of the log-normal with this median and 95th percentile."""
    sigma = max(1e-6, math.log(max(p95_s, median_s * 1.0001) / median_s) / Z95)
    return math.log(median_s), sigma


def arrivals(scenario: Scenario, rng: random.Random) -> Iterator[float]:
    """Yield arrival times (s) of a Poisson process with the scenario's rising rate (thinning)."""
    peak_per_s = scenario.peak_per_min / 60
    t = 0.0
    end_s = scenario.hour_min * 60
    while True:
        t += rng.expovariate(peak_per_s)
        if t >= end_s:
            return
        minute = t / 60
        rate = scenario.peak_per_min
        if minute < scenario.ramp_min:
            climb = (scenario.peak_per_min - scenario.start_per_min) * minute / scenario.ramp_min
            rate = scenario.start_per_min + climb
        if rng.random() < rate / scenario.peak_per_min:
            yield t


def simulate(scenario: Scenario, mix: Sequence[str], costs: dict[str, dict[str, Cost]]) -> Outcome:
    """Run one deadline hour; return what the submissions saw."""
    # Separate streams: every fleet of a sweep sees the same submissions (arrivals, exercises, GPU or not), so
    # the tables compare fleets, not luck.
    rng = random.Random(scenario.seed)  # noqa: S311 - a simulation, reproducible by its seed
    demand = random.Random(scenario.seed + 1)  # noqa: S311
    env = simpy.Environment()
    cpu = simpy.Resource(env, capacity=max(1, scenario.nodes * scenario.slots))
    gpu = simpy.Resource(env, capacity=max(1, scenario.nodes * scenario.gpus)) if scenario.gpus else None
    # GPU workers run every job in fresh containers (a waiting pair would hold its GPUs): cold costs there.
    by_queue = {"cpu": costs[scenario.path], "gpu": costs["cold"]}
    shapes = {
        (queue, kind): lognormal(c.latency_p50_s, c.latency_p95_s)
        for queue, kinds in by_queue.items()
        for kind, c in kinds.items()
    }
    waits: list[float] = []
    verdicts: list[float] = []
    by_kind: dict[str, list[float]] = {}
    busy = {"cpu": 0.0, "gpu": 0.0}
    pending = [0]

    def job(kind: str, needs_gpu: bool) -> Generator[simpy.Event, Any, None]:
        arrived = env.now
        pending[0] += 1
        queue = gpu if needs_gpu and gpu is not None else cpu
        lane = "gpu" if queue is gpu else "cpu"
        with queue.request() as slot:
            yield slot
            waits.append(env.now - arrived)
            mu, sigma = shapes[(lane, kind)]
            latency = rng.lognormvariate(mu, sigma)
            yield env.timeout(latency)
            pending[0] -= 1
            total = env.now - arrived + API_SHARE_S
            verdicts.append(total)
            by_kind.setdefault(kind, []).append(total)
            held = max(latency, by_queue[lane][kind].core_s)  # the rest of its CPU time (its replacement's warm-up)
            yield env.timeout(held - latency)
            busy[lane] += held

    def source() -> Generator[simpy.Event, Any, None]:
        for at in arrivals(scenario, demand):
            yield env.timeout(at - env.now)
            env.process(job(demand.choice(mix), demand.random() < scenario.gpu_share))

    env.process(source())
    hour_s = scenario.hour_min * 60
    env.run(until=hour_s)
    waiting_at_end = pending[0]
    env.run()  # let the queue drain: their waits count too
    out = Outcome(scenario=scenario, submissions=len(verdicts), waiting_at_end=waiting_at_end)
    out.wait_p50_s, out.wait_p95_s, out.wait_max_s = pct(waits, 50), pct(waits, 95), max(waits, default=0.0)
    out.verdict_p50_s, out.verdict_p95_s = pct(verdicts, 50), pct(verdicts, 95)
    span_s = max(hour_s, env.now)  # the hour, and the drain after it when the queue outlived the deadline
    out.cpu_utilisation = busy["cpu"] / (span_s * scenario.nodes * scenario.slots)
    if scenario.gpus:
        out.gpu_utilisation = busy["gpu"] / (span_s * scenario.nodes * scenario.gpus)
    out.per_kind_p95_s = {kind: round(pct(values, 95), 3) for kind, values in sorted(by_kind.items())}
    return out


def sweep(costs: dict[str, dict[str, Cost]]) -> dict[str, Any]:
    """Run the configurations ``docs/capacity.md`` tabulates."""
    mix = bank_mix()
    tables: dict[str, list[dict[str, Any]]] = {"nodes": [], "path": [], "gpus": []}
    for slots in (2, 4, 8, 16):
        for nodes in (1, 2, 3, 4, 6):
            tables["nodes"].append(asdict(simulate(Scenario(nodes=nodes, slots=slots), mix, costs)))
    for path in ("warm", "cold"):
        for nodes in (2, 4, 6, 8):
            tables["path"].append(asdict(simulate(Scenario(nodes=nodes, slots=4, path=path), mix, costs)))
    for gpus in (1, 2, 4):
        for nodes in (1, 2, 4):
            scenario = Scenario(nodes=nodes, slots=8, gpus=gpus, gpu_share=0.3)
            tables["gpus"].append(asdict(simulate(scenario, mix, costs)))
    counts = {kind: mix.count(kind) for kind in sorted(set(mix))}
    plain = {path: {kind: asdict(cost) for kind, cost in kinds.items()} for path, kinds in costs.items()}
    return {"mix": counts, "costs": plain, "api_share_s": API_SHARE_S, "tables": tables}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--costs", type=Path, default=COSTS_FILE, help="benchmarks.docker_paths' JSON")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "capacity.json")
    parser.add_argument("--from-run", type=Path, help="a python -m benchmarks run's JSON: the CPU jobs' costs")
    parser.add_argument("--mode", default="compose", help="with --from-run: the mode whose costs to take")
    args = parser.parse_args(argv)
    costs = measured_costs(args.costs)
    if args.from_run:
        costs = costs_from_run(json.loads(args.from_run.read_text()), args.mode, costs["cold"])
    result = sweep(costs)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for name, rows in result["tables"].items():
        print(f"== {name}")
        for row in rows:
            s = row["scenario"]
            print(f"nodes={s['nodes']} slots={s['slots']} gpus={s['gpus']} path={s['path']}: "
                  f"{row['submissions']} jobs, wait p95 {row['wait_p95_s']:.2f} s (max {row['wait_max_s']:.1f}), "
                  f"verdict p95 {row['verdict_p95_s']:.2f} s, cpu {row['cpu_utilisation']:.0%}, "
                  f"gpu {row['gpu_utilisation']:.0%}, waiting at the deadline {row['waiting_at_end']}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
