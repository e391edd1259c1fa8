"""The warm memory budget (``worker/grading/sandbox/budget.py``) and how the docker pool keeps to it.

Idle reaping on the real engine is in ``test_sandbox_docker_warm.py``, of the local templates in ``test_warm.py``.
"""

from __future__ import annotations

from pathlib import Path

from worker.bank.spec import ExerciseSpec, Limits
from worker.grading.sandbox.budget import (
    MIN_BUDGET_MB,
    MemoryBudget,
    budget_mb,
    cost_mb,
    machine_memory_mb,
    measured_mb,
)
from worker.grading.sandbox.docker_warm import Shape, WarmContainers, pair_cost_mb
from worker.grading.sandbox.warm import RuntimeKey


def test_reserve_takes_only_what_fits_and_release_gives_it_back() -> None:
    budget = MemoryBudget(700)
    assert budget.reserve(320) and budget.reserve(320) and budget.used_mb == 640
    assert not budget.reserve(100) and budget.used_mb == 640  # refused: nothing taken
    budget.release(320)
    assert budget.reserve(100) and budget.used_mb == 420
    budget.release(10_000)
    assert budget.used_mb == 0  # never below zero


def test_the_default_is_a_quarter_of_the_machine(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       16384000 kB\nMemFree:  1 kB\n")
    assert machine_memory_mb(meminfo) == 16000
    assert machine_memory_mb(tmp_path / "missing") == 2048
    assert budget_mb(3000) == 3000 and budget_mb(0) >= MIN_BUDGET_MB


def _shape(framework: str = "torch") -> Shape:
    key = RuntimeKey(preload=(framework,) if framework != "python" else (), framework="none", replicas=1, threads=1)
    return Shape("gpulab/grader:cpu", key, Limits())


def _never(*_args: object) -> object:
    raise AssertionError("no engine call expected")


def test_the_docker_pool_makes_no_pair_the_budget_has_no_room_for() -> None:
    pool = WarmContainers(client=_never, specs=_never, size=2, budget=MemoryBudget(pair_cost_mb(_shape()) - 1))  # type: ignore[arg-type]
    pool.prewarm([_shape()])
    assert pool.started == 0 and pool.budget is not None and pool.budget.used_mb == 0
    assert pair_cost_mb(_shape()) == 2 * cost_mb("torch") and pair_cost_mb(_shape("python")) == 2 * cost_mb("python")


def test_spec_shape_matches_what_its_jobs_ask_for(tmp_path: Path) -> None:
    from tests.worker.conftest import tiny_add_files
    from worker.grading.jobdir import write_job_dir

    spec = ExerciseSpec.from_files("tiny-add", tiny_add_files())
    job = write_job_dir(tmp_path / "job", spec=spec, code=spec.solution)
    assert Shape.of_spec("img", spec) == Shape.of_job("img", job, spec.limits)


def test_a_measured_size_replaces_the_estimate(tmp_path: Path) -> None:
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "smaps_rollup").write_text("Rss:  400000 kB\nPss:  307201 kB\n")
    (tmp_path / "8").mkdir()
    (tmp_path / "8" / "status").write_text("Name: x\nVmRSS:  2048 kB\n")  # no smaps_rollup: the resident size
    assert measured_mb(7, proc=tmp_path) == 301 and measured_mb(8, proc=tmp_path) == 2
    assert measured_mb(9, proc=tmp_path) is None
    budget = MemoryBudget(700)
    assert budget.reserve(320)
    budget.adjust(320, 301)
    assert budget.used_mb == 301
    budget.adjust(301, 900)  # a measured size may exceed the total: later reservations then wait
    assert budget.used_mb == 900 and not budget.reserve(1)
