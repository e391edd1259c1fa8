"""The docker backend's warm pool on the real engine and image: pairs started before their job, one job each.

Tests marked ``docker`` need ``scripts/dockerd`` and ``docker/build-images``; without them they skip, unless
``GPULAB_REQUIRE_DOCKER=1`` (CI) makes that a failure.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.worker.conftest import tiny_add_files
from tests.worker.test_sandbox_docker import CORRECT, PROBES, _unavailable
from worker.bank.spec import ExerciseSpec
from worker.core.config import Settings
from worker.core.errors import SandboxUnavailable
from worker.core.outcome import GradeOutcome, Verdict
from worker.grading.pipeline import grade
from worker.grading.sandbox import get_sandbox
from worker.grading.sandbox.budget import MemoryBudget
from worker.grading.sandbox.docker import API_VERSION, LABEL_JOB, SUBJECT_UID, APIClient, DockerSandbox
from worker.grading.sandbox.docker_warm import LABEL_WARM, Shape, WarmContainers, WarmDockerSandbox, pair_cost_mb

pytestmark = [pytest.mark.docker, pytest.mark.slow]

MARGIN_S = 2.0


def _containers() -> dict[str, dict[str, str]]:
    """Return every gpulab container's name and labels."""
    api = APIClient(version=API_VERSION, timeout=15)
    try:
        found = api.containers(all=True, filters={"label": LABEL_JOB})
        return {c["Names"][0].lstrip("/"): c.get("Labels") or {} for c in found}
    finally:
        api.close()


@pytest.fixture(scope="module")
def warm() -> Iterator[WarmDockerSandbox]:
    """A warm docker backend for plain Python jobs, its pool closed (and its containers gone) afterwards."""
    sandbox = WarmDockerSandbox(runtimes=("python",), pool_size=1, timeout_margin_s=MARGIN_S, api_timeout_s=15)
    try:
        sandbox.check()
    except SandboxUnavailable as exc:
        _unavailable(f"the docker sandbox cannot run here: {exc}")
    yield sandbox
    sandbox.pool.close()
    assert _containers() == {}, "the pool left containers behind"


def _spec(**limits: float) -> ExerciseSpec:
    return ExerciseSpec.from_files("tiny-add", tiny_add_files(**limits))


def _ready(sandbox: WarmDockerSandbox, spec: ExerciseSpec) -> Shape:
    """Warm ``spec``'s shape and wait until a pair of it is ready."""
    shape = Shape.of_spec(sandbox.image, spec)
    sandbox.pool.wait_ready(shape)
    return shape


def _grade_warm(sandbox: WarmDockerSandbox, code: str, **limits: float) -> GradeOutcome:
    """Grade ``code`` in a ready pair (the test fails if the job ran cold)."""
    spec = _spec(**limits)
    _ready(sandbox, spec)
    served = sandbox.pool.served
    outcome = grade(spec, code, sandbox=sandbox)
    assert sandbox.pool.served == served + 1, "the job did not run in a warm pair"
    return outcome


def test_a_ready_pair_grades_the_job_and_is_replaced_by_a_new_one(warm: WarmDockerSandbox) -> None:
    spec = _spec()
    shape = _ready(warm, spec)
    [pair] = warm.pool.waiting(shape)
    before = set(pair.names.values())
    assert all(_containers()[name].get(LABEL_WARM) == "1" for name in before)

    started = time.monotonic()
    outcome = grade(spec, CORRECT, sandbox=warm)
    took_s = time.monotonic() - started

    assert outcome.verdict is Verdict.passed, outcome
    assert outcome.score == outcome.max_score == 3 and outcome.sandbox == "docker"
    assert took_s < 30, took_s
    assert not before & set(_containers())  # the used pair is gone
    _ready(warm, spec)  # and a fresh one takes its place
    assert warm.pool.ready_count(shape) == 1
    wrong = _grade_warm(warm, "def add(a, b):\n    return a - b\n")
    assert wrong.verdict is Verdict.failed and "add(1, 2) should be 3" in " ".join(t.message for t in wrong.tests)


def test_learner_code_in_a_warm_pair_is_isolated_like_a_cold_run(warm: WarmDockerSandbox) -> None:
    outcome = _grade_warm(warm, PROBES + "print('CTL', sorted(os.listdir('/ctl')))\n")
    lines = dict(line.split(" ", 1) for line in outcome.stdout.splitlines() if " " in line)
    assert outcome.verdict is Verdict.passed, outcome
    assert lines["NET"].startswith("refused"), lines
    assert lines["IFACES"] == "lo"
    assert lines["IDS"] == f"{SUBJECT_UID} {SUBJECT_UID}"
    assert lines["USR"].startswith("refused")
    assert lines["SEES"] == "ipc,probes,subject.json,submission"  # what a cold subject sees: no hidden test
    assert lines["DOCKER_SOCK"] == "False"
    assert int(lines["CAPS"], 16) == 0 and lines["NNP"] == "1" and lines["SECCOMP"] == "2"
    assert lines["PTRACE"] == "-1 1"
    assert lines["RULES"] == "1 38 1 0"
    assert lines["CTL"] == "['go']"  # its own FIFO, nothing else


def test_nothing_crosses_from_one_job_to_the_next(warm: WarmDockerSandbox) -> None:
    leave = CORRECT + "open('/tmp/left-behind', 'w').write('x')\nopen('/dev/shm/left-behind', 'w').write('x')\n"
    assert _grade_warm(warm, leave).verdict is Verdict.passed
    look = CORRECT + (
        "import os\nprint('LEFT', os.path.exists('/tmp/left-behind'), os.path.exists('/dev/shm/left-behind'))\n"
    )
    outcome = _grade_warm(warm, look)
    assert "LEFT False False" in outcome.stdout, outcome.stdout


def test_limits_hold_in_a_warm_pair(warm: WarmDockerSandbox) -> None:
    loop = _grade_warm(warm, "while True:\n    pass\n", timeout_s=2)
    assert loop.verdict is Verdict.timeout, loop
    bomb = _grade_warm(warm, "x = bytearray(400 * 1024 * 1024)\n" + CORRECT, memory_mb=128)
    assert bomb.verdict is Verdict.memory_limit, bomb


def test_a_job_without_a_ready_pair_runs_cold_and_warms_its_shape(warm: WarmDockerSandbox) -> None:
    spec = _spec(timeout_s=7)  # a shape nothing warmed yet
    shape = Shape.of_spec(warm.image, spec)
    served = warm.pool.served
    outcome = grade(spec, CORRECT, sandbox=warm)
    assert outcome.verdict is Verdict.passed and warm.pool.served == served  # cold
    _ready(warm, spec)  # the job asked for its shape: a pair comes up for the next one
    assert warm.pool.ready_count(shape) == 1


def test_a_pair_of_another_image_is_removed_not_used(warm: WarmDockerSandbox) -> None:
    spec = _spec(timeout_s=9)
    shape = _ready(warm, spec)
    old = {name for pair in warm.pool.waiting(shape) for name in pair.names.values()}
    assert len(old) == 2
    assert warm.pool.take(shape, "sha256:" + "0" * 64) is None  # the image was rebuilt since it was made
    assert not old & set(_containers())  # removed, and never given the job
    _ready(warm, spec)  # a pair of the current image replaces it


def test_pairs_of_an_idle_shape_are_removed_and_their_memory_given_back(warm: WarmDockerSandbox) -> None:
    budget = MemoryBudget(10_000)
    pool = WarmContainers(client=warm._new_client, specs=warm.container_specs, size=1, budget=budget, idle_s=600)
    try:
        busy, idle = Shape.of_spec(warm.image, _spec(timeout_s=11)), Shape.of_spec(warm.image, _spec(timeout_s=12))
        for shape in (busy, idle):
            pool.wait_ready(shape)
        names = {shape: {n for p in pool.waiting(shape) for n in p.names.values()} for shape in (busy, idle)}
        assert names[busy] | names[idle] <= set(_containers())
        ready = [p for shape in (busy, idle) for p in pool.waiting(shape)]
        # Each pair is charged what its containers measure, not the estimate it reserved before it started.
        assert budget.used_mb == sum(p.cost_mb for p in ready) and all(
            0 < p.cost_mb < 4 * pair_cost_mb(busy) for p in ready
        )
        assert {k["kind"] for k in pool.status()} == {busy.label, idle.label} and busy.label.endswith(", 1024 MB")
        time.sleep(1)
        used = time.monotonic()
        assert pool.take(busy, "sha256:" + "0" * 64) is None  # a job of busy (an image rebuilt since: run cold)
        assert pool.reap_idle(now=used + 300) == 0  # nothing idle for 600 s yet
        assert pool.reap_idle(now=used + 599.5) == 1  # idle's pair: last asked for > 600 s before; busy's shape kept
        assert not names[idle] & set(_containers()) and pool.ready_count(idle) == 0
    finally:
        pool.close()
    assert budget.used_mb == 0


def test_prewarm_makes_one_pair_of_every_shape_in_demand_order_before_a_second(
    warm: WarmDockerSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    import worker.grading.sandbox.docker_warm as docker_warm

    monkeypatch.setattr(docker_warm, "PREWARM_PARALLEL", 1)  # one at a time: the order is the order they started
    budget = MemoryBudget(10_000)
    pool = WarmContainers(client=warm._new_client, specs=warm.container_specs, size=2, budget=budget)
    made: list[Shape] = []
    real_make = pool._make

    def recording_make(shape: Shape) -> docker_warm.Pair:
        made.append(shape)
        return real_make(shape)

    monkeypatch.setattr(pool, "_make", recording_make)
    first, second, third = (Shape.of_spec(warm.image, _spec(timeout_s=t)) for t in (21, 22, 23))
    try:
        pool.prewarm([first, second, third])
        assert pool.prewarming()
        deadline = time.monotonic() + 240
        while pool.prewarming():
            assert time.monotonic() < deadline, f"still warming after 240 s: {made}"
            time.sleep(0.2)
        assert made == [first, second, third, first, second, third]
        assert all(pool.ready_count(shape) == 2 for shape in (first, second, third))
        pool.prewarm([third, first])  # all there already: nothing more is made
        assert not pool.prewarming() and len(made) == 6
    finally:
        pool.close()
    assert budget.used_mb == 0


def test_gpu_workers_and_unwarmed_runtimes_run_cold(tmp_path: Path) -> None:
    docker = {"sandbox": "docker", "mode": "dev", "data_dir": tmp_path}
    assert isinstance(get_sandbox(Settings(**docker, warm_pools="python")), WarmDockerSandbox)  # type: ignore[arg-type]
    gpu = get_sandbox(Settings(**docker, warm_pools="all", gpu_ids="0"))  # type: ignore[arg-type]
    assert type(gpu) is DockerSandbox
    plain = WarmDockerSandbox(runtimes=("torch",), pool_size=1)
    assert not plain.serves(Shape.of_spec(plain.image, _spec()))
    assert plain.prewarm([_spec()]) == 0
