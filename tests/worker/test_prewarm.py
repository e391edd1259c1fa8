"""Prewarming: the template keys derived from exercises are the ones their jobs ask for, and start up front."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from app.domain.exercises.bank import sync_bank
from app.domain.platform.db import session_scope
from app.domain.platform.migrate import upgrade
from app.jobs import prewarm
from app.settings import Settings, get_settings
from tests.support import BANK, configure
from tests.worker.conftest import tiny_add_files
from worker.bank.spec import ExerciseSpec, load_bank
from worker.grading.jobdir import write_job_dir
from worker.grading.sandbox.warm import JUDGE_KEY, RuntimeKey, Template, WarmPool, shared_pool


def test_spec_keys_are_the_keys_their_jobs_ask_for(tmp_path: Path) -> None:
    specs = [s for s in load_bank(BANK) if s.kind == "code"]
    assert {s.framework for s in specs} == {"python", "torch", "tensorflow"}
    for spec in specs:
        job = write_job_dir(tmp_path / spec.slug, spec=spec, code=spec.solution)
        assert RuntimeKey.of_spec(spec) == RuntimeKey.of_job(job, spec.limits), spec.slug


def test_keys_for_the_bank_are_distinct_and_include_the_judges() -> None:
    specs = load_bank(BANK)
    keys = WarmPool(("python", "torch")).keys_for(specs)
    assert len(keys) == len(set(keys))
    assert JUDGE_KEY in keys and any(k.runtime == "judge-torch" for k in keys)
    assert any(k.role == "subject" and k.runtime == "torch" for k in keys)
    assert not any(k.framework_runtime == "tensorflow" for k in keys), "tensorflow is not warm in this pool"
    assert WarmPool(()).keys_for(specs) == []


def test_a_gpu_workers_keys_are_those_of_jobs_given_their_gpus(tmp_path: Path) -> None:
    spec = next(s for s in load_bank(BANK) if s.kind == "code" and s.framework == "torch")
    subjects = [k for k in WarmPool(("torch",)).keys_for([spec], gpus=2) if k.role == "subject"]
    assert [k.gpus for k in subjects] == [2]
    job = write_job_dir(tmp_path / spec.slug, spec=spec, code=spec.solution, gpus=2)
    assert subjects == [RuntimeKey.of_job(job, spec.limits)]  # what the job asks for, so it finds the template


def test_prewarm_starts_every_template_before_the_first_job(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A real embedded database holding one published exercise: the prewarm reads it as serve would.
    bank = tmp_path / "bank"
    for name, text in tiny_add_files().items():
        (bank / "tiny-add" / name).parent.mkdir(parents=True, exist_ok=True)
        (bank / "tiny-add" / name).write_text(text)
    configure(monkeypatch, mode="dev", data_dir=str(tmp_path), warm_pools="python", grading_workers="2")
    upgrade()
    with session_scope() as session:
        sync_bank(session=session, root=bank)
    spec = ExerciseSpec.from_files("tiny-add", tiny_add_files())
    assert [s.slug for s in prewarm.published_specs()] == ["tiny-add"]
    pool = shared_pool(("python",), 2)
    pool.close()  # nothing left from other tests
    try:
        thread = prewarm.prewarm_in_background(get_settings())  # as serve and worker do, in a thread that ends
        assert thread is not None
        thread.join(timeout=60)
        time.sleep(0.2)
        live = [t.key for t in pool.templates() if t.alive()]
        assert sorted(live, key=repr) == sorted([RuntimeKey.of_spec(spec), JUDGE_KEY] * 2, key=repr)
    finally:
        pool.close()


def test_a_worker_that_starts_before_the_bank_prewarms_once_it_is_there(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # As in docker-compose.yml: the worker starts while the API has not yet made the tables nor synced the bank.
    bank = tmp_path / "bank"
    for name, text in tiny_add_files().items():
        (bank / "tiny-add" / name).parent.mkdir(parents=True, exist_ok=True)
        (bank / "tiny-add" / name).write_text(text)
    configure(monkeypatch, mode="dev", data_dir=str(tmp_path), warm_pools="python", grading_workers="1")
    monkeypatch.setattr(prewarm, "RETRY_MAX_S", 1.0)
    pool = shared_pool(("python",), 1)
    pool.close()  # nothing left from other tests
    caplog.set_level("INFO", logger="app.jobs.prewarm")
    try:
        thread = prewarm.prewarm_in_background(get_settings())
        assert thread is not None
        deadline = time.monotonic() + 60
        while "nothing to prewarm yet" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "nothing to prewarm yet" in caplog.text and thread.is_alive()  # it found no table, and waits
        upgrade()
        with session_scope() as session:
            sync_bank(session=session, root=bank)
        thread.join(timeout=120)
        assert not thread.is_alive()
        live = [t.key for t in pool.templates() if t.alive()]
        spec = ExerciseSpec.from_files("tiny-add", tiny_add_files())
        assert sorted(live, key=repr) == sorted([RuntimeKey.of_spec(spec), JUDGE_KEY], key=repr)
    finally:
        pool.close()


def test_a_bank_with_nothing_to_warm_is_given_up_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    configure(monkeypatch, mode="dev", data_dir=str(tmp_path), warm_pools="python", grading_workers="1")
    upgrade()  # the tables, and no exercise in them
    caplog.set_level("INFO", logger="app.jobs.prewarm")
    thread = prewarm.prewarm_in_background(get_settings(), patience_s=0)
    assert thread is not None
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert "prewarmed nothing (no published code exercise yet)" in caplog.text


def test_a_slot_that_is_not_up_yet_does_not_make_the_job_wait() -> None:
    pool = WarmPool(("python",), size=2)
    key = RuntimeKey.of_spec(ExerciseSpec.from_files("tiny-add", tiny_add_files()))
    try:
        # Nothing live: this job waits for its template. It asks from a thread that then ends (as the prewarm
        # thread does): the template must outlive it (its parent-death signal follows the starting thread).
        got: list[Template] = []
        asker = threading.Thread(target=lambda: got.append(pool.acquire(key)))
        asker.start()
        asker.join()
        first = got[0]
        time.sleep(0.2)
        assert first.alive(), "the template died with the thread that asked for it"
        started = time.monotonic()
        second = pool.acquire(key)  # slot 1 is not up: served by the live slot 0, slot 1 starts behind it
        assert second is first and time.monotonic() - started < 0.5
        deadline = time.monotonic() + 60
        while len([t for t in pool.templates() if t.alive()]) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        third = pool.acquire(key)  # slot 0 again, then slot 1: round-robin over two live templates
        fourth = pool.acquire(key)
        assert {third.pid, fourth.pid} == {t.pid for t in pool.templates()} and third is not fourth
    finally:
        pool.close()


def test_nothing_to_prewarm_without_warm_pools_or_on_gpu_workers(tmp_path: Path) -> None:
    cold = Settings(mode="dev", data_dir=tmp_path)  # type: ignore[arg-type]
    docker = Settings(mode="dev", data_dir=tmp_path, sandbox="docker")  # type: ignore[arg-type]
    gpu = Settings(mode="dev", data_dir=tmp_path, sandbox="docker", warm_pools="all", gpu_ids="0")  # type: ignore[arg-type]
    assert prewarm.prewarm_in_background(cold) is None and prewarm.prewarm_in_background(docker) is None
    assert prewarm.prewarm(cold) == 0 and prewarm.prewarm(docker) == 0 and prewarm.prewarm(gpu) == 0


@pytest.mark.docker
@pytest.mark.slow
def test_a_docker_worker_prewarms_a_pair_per_job_shape(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from worker.grading.sandbox import get_sandbox
    from worker.grading.sandbox.docker_warm import Shape, WarmDockerSandbox

    bank = tmp_path / "bank"
    for name, text in tiny_add_files().items():
        (bank / "tiny-add" / name).parent.mkdir(parents=True, exist_ok=True)
        (bank / "tiny-add" / name).write_text(text)
    configure(monkeypatch, mode="dev", data_dir=str(tmp_path), sandbox="docker", warm_pools="python",
              grading_workers="1", docker_api_timeout_s="15")  # fmt: skip
    upgrade()
    with session_scope() as session:
        sync_bank(session=session, root=bank)
    sandbox = get_sandbox(get_settings())
    assert isinstance(sandbox, WarmDockerSandbox)
    try:
        sandbox.check()
    except Exception as exc:
        from tests.worker.test_sandbox_docker import _unavailable

        _unavailable(f"the docker sandbox cannot run here: {exc}")
    shape = Shape.of_spec(sandbox.image, ExerciseSpec.from_files("tiny-add", tiny_add_files()))
    try:
        assert prewarm.prewarm(get_settings()) == 1
        sandbox.pool.wait_ready(shape)
        assert sandbox.pool.started == 1  # the one pair prewarm asked for (GPULAB_GRADING_WORKERS=1)
    finally:
        sandbox.pool.close()
