"""Where a warm grading's time goes on the embedded path: ``.venv/bin/python -m benchmarks.job_profile`` (root).

Grades one exercise's reference solution ``--runs`` times through ``worker.grading.pipeline.grade`` with the
local sandbox and its warm templates, exactly as ``gpulab serve`` does (after one unmeasured job that starts the
templates), and times each step of every job by wrapping the functions that do it: the job folder, the
sandbox's checks, the cgroups, the seccomp filter, the role plans, taking a template, the fork request, the
judge's whole run (its pytest start-up, each test from the result's ``duration_ms``, its exit), the subject's end,
removing the cgroups and the stage, reading the result, the verdict and the messages. Prints p50/p95 per step and
writes them as JSON (``--out``), beside a cold ``import torch`` timed in a fresh interpreter in the same run.

Kept by hand (a profiler would do): cProfile sees only this process; the steps run in three (this one, the
template's fork for the judge, the one for the subject), and what matters is wall time per step, not calls.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.common import REPO, pct

_spans: dict[str, list[float]] = defaultdict(list)
_tests: list[list[int]] = []  # each job's tests' durations (ms), as the judge measured them
_local = threading.local()


@contextmanager
def _span(name: str) -> Iterator[None]:
    started = time.perf_counter()
    try:
        yield
    finally:
        _spans[name].append(time.perf_counter() - started)


def _wrap(owner: Any, attribute: str, name: str) -> None:
    original = getattr(owner, attribute)

    def timed(*args: Any, **kwargs: Any) -> Any:
        with _span(name):
            return original(*args, **kwargs)

    setattr(owner, attribute, timed)


def _instrument() -> None:
    """Wrap the steps of a grading (see the module docstring) with timers."""
    from worker.grading import pipeline
    from worker.grading.sandbox import cgroups, local, warm

    _wrap(pipeline, "write_job_dir", "job folder written")
    original_read = pipeline.read_result

    def read_result(out: Path) -> Any:
        with _span("result read"):
            result = original_read(out)
        if result:  # what the judge measured of each test, inside the sandbox
            _tests.append([int(t.get("duration_ms", 0)) for t in result.get("tests", [])])
        return result

    pipeline.read_result = read_result
    _wrap(pipeline, "decide", "verdict decided")
    _wrap(pipeline, "_test_outcomes", "tests' messages cleaned and scored")
    _wrap(local.LocalSandbox, "check", "sandbox checks")
    _wrap(local, "write_filter", "seccomp filter written")
    _wrap(local.RolePlan, "prepare", "role plans (mounts, ids, limits)")
    _wrap(cgroups.JobCgroups, "__init__", "cgroups made")
    _wrap(cgroups.JobCgroups, "remove", "cgroups removed")
    _wrap(warm.WarmPool, "acquire", "template taken")
    _wrap(warm.Template, "spawn", "fork requested")
    original_supervise = warm.supervise

    def supervise(remote: Any, **kwargs: Any) -> Any:
        role = getattr(_local, "role", "?")
        with _span(f"{role}: fork to exit"):
            return original_supervise(remote, **kwargs)

    warm.supervise = supervise
    original_starter = warm.WarmLocalSandbox._warm_starter

    def warm_starter(self: Any, template: Any, plan: Any) -> Callable[[float], Any]:
        start = original_starter(self, template, plan)

        def marked(timeout_s: float) -> Any:
            _local.role = plan.role
            return start(timeout_s)

        return marked

    warm.WarmLocalSandbox._warm_starter = warm_starter  # type: ignore[method-assign]


def cold_import_s(module: str, runs: int = 3) -> float:
    """Return the median wall time of ``import module`` in a fresh interpreter."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", f"import {module}"], check=True, capture_output=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--exercise", default="torch-dataparallel")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--bank", type=Path, default=REPO / "exercises", help="the folder holding the exercise")
    args = parser.parse_args()

    from app.settings import get_settings
    from worker.bank.spec import load_exercise
    from worker.grading.pipeline import grade
    from worker.grading.sandbox import get_sandbox
    from worker.grading.sandbox.warm import RuntimeKey

    folder = args.bank / args.exercise
    spec = load_exercise(folder)
    code = (folder / "solution.py").read_text()
    settings = get_settings()
    sandbox = get_sandbox(settings)
    pool = getattr(sandbox, "pool", None)
    if pool is None:
        raise SystemExit("GPULAB_WARM_POOLS is off: this measures warm gradings")
    subject = RuntimeKey.of_spec(spec)
    judge = pool.judge_key_for(subject)
    pool.prewarm([k for k in (subject, judge) if k is not None])
    first = grade(spec, code, sandbox=sandbox)  # starts what the prewarm had not, unmeasured
    assert first.verdict.value == "passed", first.message
    _instrument()
    totals = []
    for _ in range(args.runs):
        started = time.perf_counter()
        outcome = grade(spec, code, sandbox=sandbox)
        totals.append(time.perf_counter() - started)
        assert outcome.verdict.value == "passed", outcome.message
    cold = cold_import_s("torch") if spec.framework == "torch" else None
    rows = {name: {"p50_ms": round(pct(v, 50) * 1000, 1), "p95_ms": round(pct(v, 95) * 1000, 1), "n": len(v)}
            for name, v in sorted(_spans.items(), key=lambda kv: -statistics.median(kv[1]))}  # fmt: skip
    report = {
        "exercise": args.exercise, "runs": args.runs,
        "grade_p50_s": round(pct(totals, 50), 3), "grade_p95_s": round(pct(totals, 95), 3),
        "cold_import_s": None if cold is None else round(cold, 3),
        "share_of_cold_import": None if cold is None else round(pct(totals, 50) / cold, 3),
        "steps": rows,
        "tests_ms_p50": [round(statistics.median(column), 1) for column in zip(*_tests, strict=False)],
    }  # fmt: skip
    width = max(len(n) for n in rows)
    print(
        f"{args.exercise}: {args.runs} warm gradings, p50 {report['grade_p50_s']} s, p95 {report['grade_p95_s']} s"
        + (
            f"; a cold import torch {report['cold_import_s']} s (share {report['share_of_cold_import']})"
            if cold
            else ""
        )
    )
    for name, row in rows.items():
        print(f"  {name:<{width}}  p50 {row['p50_ms']:>8} ms  p95 {row['p95_ms']:>8} ms  ({row['n']})")
    tests = report["tests_ms_p50"]
    judge = rows.get("judge: fork to exit", {}).get("p50_ms", 0.0)
    print(
        f"  inside the judge: {len(tests)} tests, p50 ms each {tests} (sum {sum(tests):.0f}); the rest of the judge's"
        f" {judge} ms is entering the sandbox, pytest's start-up and collection, and its exit"
    )
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    pool.close()


if __name__ == "__main__":
    main()
