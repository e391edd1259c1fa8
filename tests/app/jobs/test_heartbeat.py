"""A grading process's beat carries what it keeps warm, read back as the dashboard and /metrics read it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.domain.models import WorkerBeat
from app.domain.operations.liveness import worker_state
from app.domain.platform.db import engine_for, session_scope
from app.domain.platform.migrate import upgrade
from app.jobs.heartbeat import ProcessBeat
from app.settings import get_settings
from tests.support import configure
from worker.grading.sandbox import warm_status
from worker.grading.sandbox.warm import JUDGE_KEY, close_shared, shared_pool


@pytest.fixture
def database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'beat.db'}"
    configure(monkeypatch, mode="dev", database_url=url, data_dir=str(tmp_path))
    upgrade()
    yield url
    engine_for(url).dispose()


def test_the_beat_carries_each_warm_kind_with_its_hits_and_misses(database: str) -> None:
    pool = shared_pool(("python",), 1)
    try:
        assert pool.acquire(JUDGE_KEY) is not None and pool.acquire(JUDGE_KEY) is not None
        [judge] = [k for k in warm_status() if k["kind"] == "judge"]
        assert judge["warm"] == 1 and judge["hits"] == 1 and judge["misses"] == {"first use": 1}
        beat = ProcessBeat(get_settings(), name="embedded@test:1", queues=["cpu"])
        assert beat.beat()
        with session_scope() as session:
            row = session.get(WorkerBeat, "embedded@test:1")
            assert row is not None
            state = worker_state(row, settings=get_settings(), now=datetime.now(UTC))
        [kind] = [k for k in state.warm if k.kind == "judge"]
        assert (kind.warm, kind.hits, kind.misses, kind.cold) == (1, 1, {"first use": 1}, "")
        assert kind.memory_mb > 0 and kind.hit_pct == 50.0
    finally:
        close_shared()
    assert not [k for k in warm_status() if k["kind"] == "judge"]  # a closed pool keeps nothing warm


def test_a_pool_module_another_thread_is_still_importing_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    # The beat runs while the prewarm thread imports the docker pool module: sys.modules holds it half-made.
    import sys
    import types

    from worker.grading.sandbox import close_warm_pools

    monkeypatch.setitem(sys.modules, "worker.grading.sandbox.docker_warm", types.ModuleType("half-made"))
    pool = shared_pool(("python",), 1)
    try:
        assert pool.acquire(JUDGE_KEY) is not None
        assert [k["kind"] for k in warm_status()] == ["judge"]  # the whole module's kinds, none of the half-made's
    finally:
        close_warm_pools()
    assert warm_status() == []
