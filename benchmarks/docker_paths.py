"""The docker backend's two paths side by side: ``.venv/bin/python -m benchmarks.docker_paths [--runs N] [--out F]``.

Grades each reference solution of a plain-Python, a torch and a TensorFlow exercise ``runs`` times in warm
pairs (``WarmDockerSandbox``: a pair started before the job) and in fresh containers (``DockerSandbox``),
one job at a time, through ``worker.grading.pipeline.grade`` (no API, no queue: the grading itself), and
records per job:

- ``latency_s``: what the grading takes, the part of submit->verdict the sandbox owns;
- ``core_s``: the machine's CPU time the job costs (busy jiffies of ``/proc/stat`` from the job's start until,
  on the warm path, its replacement pair is ready: the work the warm path moves off the critical path is
  still counted). Other load on the machine is counted too: run it on a quiet machine.

Results go to JSON (``docs/docker_paths.json`` by default); ``benchmarks/capacity.py`` reads them.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, pct

EXERCISES = {"python": "python-split-batch", "torch": "torch-unwrap-state-dict", "tensorflow": "tf-mirrored-scope"}
HZ = os.sysconf("SC_CLK_TCK")


def busy_s() -> float:
    """Return the CPU time all cores spent busy since boot (user, nice, system, irq, softirq, steal)."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / HZ


def measure(runs: int) -> dict[str, Any]:
    from worker.bank.spec import load_exercise
    from worker.grading.pipeline import grade
    from worker.grading.sandbox.docker import DockerSandbox
    from worker.grading.sandbox.docker_warm import Shape, WarmDockerSandbox

    warm = WarmDockerSandbox(runtimes=tuple(EXERCISES), pool_size=1, api_timeout_s=30)
    cold = DockerSandbox(api_timeout_s=30)
    warm.check()
    out: dict[str, Any] = {"runs": runs, "machine_cores": os.cpu_count(), "at": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:
        for runtime, slug in EXERCISES.items():
            spec = load_exercise(REPO / "exercises" / slug)
            shape = Shape.of_spec(warm.image, spec)

            warm.pool.wait_ready(shape)
            rows: dict[str, dict[str, list[float]]] = {p: {"latency_s": [], "core_s": []} for p in ("warm", "cold")}
            verdicts: set[str] = set()
            for _ in range(runs):
                time.sleep(0.5)  # let the previous job's leftovers settle before counting CPU
                served, cpu, started = warm.pool.served, busy_s(), time.monotonic()
                verdicts.add(grade(spec, spec.solution, sandbox=warm).verdict.value)
                rows["warm"]["latency_s"].append(time.monotonic() - started)
                warm.pool.wait_ready(shape)  # the replacement's warm-up is this job's cost too
                rows["warm"]["core_s"].append(busy_s() - cpu)
                if warm.pool.served != served + 1:
                    raise RuntimeError("a warm measurement ran cold")
                time.sleep(0.5)
                cpu, started = busy_s(), time.monotonic()
                verdicts.add(grade(spec, spec.solution, sandbox=cold).verdict.value)
                rows["cold"]["latency_s"].append(time.monotonic() - started)
                rows["cold"]["core_s"].append(busy_s() - cpu)
            out[runtime] = {"slug": slug, "verdicts": sorted(verdicts)} | {
                path: {
                    "latency_p50_s": statistics.median(r["latency_s"]), "latency_p95_s": pct(r["latency_s"], 95),
                    "core_s_median": statistics.median(r["core_s"]), "latency_s": r["latency_s"], "core_s": r["core_s"],
                }
                for path, r in rows.items()
            }  # fmt: skip
    finally:
        warm.pool.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "docker_paths.json")
    args = parser.parse_args()
    result = measure(args.runs)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    for runtime in EXERCISES:
        row = result[runtime]
        for path in ("warm", "cold"):
            r = row[path]
            print(f"{runtime:10} {path}: p50 {r['latency_p50_s']:.3f} s, p95 {r['latency_p95_s']:.3f} s, "
                  f"{r['core_s_median']:.2f} core-s per job ({row['verdicts']})")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
