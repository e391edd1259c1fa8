"""GPU grading hosts for real (Celery, Redis, PostgreSQL, ``gpulab worker --queues gpu``), on stand-in GPUs.

A host whose GPU is gone stops taking GPU jobs and gives the one it took back, uncounted, to a working host,
which grades it; a GPU host killed in the middle of a grading loses nothing: another host grades it once its lease
runs out. Each host has its own data folder (its GPU locks, as on its own node) and stand-in driver table and
nodes (``tests/worker/test_gpu_devices.py``'s format), readable by the sandbox users.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import select

from app.domain.accounts.passwords import create_user
from app.domain.exercises.bank import upsert_exercise
from app.domain.models import Exercise, Role, Submission, SubmissionStatus, User, WorkerBeat
from app.domain.platform.db import session_scope
from app.domain.platform.migrate import upgrade
from app.domain.submissions.lifecycle import create_submission
from app.jobs.dispatch import CeleryDispatcher
from app.settings import get_settings
from tests.support import (
    REDIS_URL,
    child_env,
    configure,
    fresh_postgres_db,
    require_service,
    start_gpulab,
    stop_gracefully,
    wait_for,
    wait_until_ready,
)
from worker.bank.spec import ExerciseSpec
from worker.core.outcome import Verdict

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]
UUID = "GPU-5eed0000-0000-4000-8000-000000000001"
SLOW_SOLUTION = "import time\n\n\ndef add(a, b):\n    time.sleep(SLEEP)\n    return a + b\n"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    require_service("PostgreSQL", "127.0.0.1", 5432)
    require_service("Redis", "127.0.0.1", 6379)
    env = {"mode": "dev", "database_url": fresh_postgres_db("gpulab_gpu_hosts"), "broker_url": REDIS_URL,
           "data_dir": str(tmp_path_factory.mktemp("api-data"))}  # fmt: skip
    redis.Redis.from_url(REDIS_URL).flushdb()
    yield env


def _gpu(root: Path, *, working: bool) -> tuple[Path, Path]:
    """Make a stand-in node with one GPU (minor 0) under ``root``; without its node when not ``working``."""
    proc, dev = root / "proc", root / "dev"
    info = proc / "driver" / "nvidia" / "gpus" / "0000:01:00.0" / "information"
    info.parent.mkdir(parents=True)
    info.write_text(f"Model: \t NVIDIA H100\nGPU UUID: \t {UUID}\nBus Location: \t 0000:01:00.0\nDevice Minor: \t 0\n")
    dev.mkdir()
    for name in ("nvidia0", "nvidiactl", "nvidia-uvm") if working else ("nvidiactl", "nvidia-uvm"):
        (dev / name).write_text(f"stand-in {name}")
        (dev / name).chmod(0o666)
    for path in (root, proc, dev, *proc.rglob("*")):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return proc, dev


@pytest.fixture
def hosts(shared: dict[str, str]) -> Iterator[dict[str, object]]:
    """Start hosts on demand: ``start(name, working=...)``; all stopped afterwards."""
    roots: list[Path] = []
    procs: dict[str, object] = {}

    def start(name: str, *, working: bool) -> tuple[object, Path]:
        root = Path(tempfile.mkdtemp(prefix=f"gpulab-gpu-host-{name}-"))
        root.chmod(0o755)
        roots.append(root)
        proc, dev = _gpu(root, working=working)
        data = root / "data"
        data.mkdir()
        env = child_env(**{**shared, "data_dir": str(data), "gpu_ids": "0", "gpus_per_job": "1",
                           "gpu_dev_root": str(dev), "gpu_proc_root": str(proc), "grading_lease_s": "6",
                           "heartbeat_interval_s": "1", "sweep_interval_s": "1"})  # fmt: skip
        log = root / "worker.log"
        process = start_gpulab(["worker", "--queues", "gpu", "--concurrency", "1", "--examples-concurrency", "0"],
                               env, log)  # fmt: skip
        wait_until_ready(log, process, timeout_s=90)
        procs[name] = process
        return process, log

    yield {"start": start, "procs": procs}
    for process in procs.values():
        if process.poll() is None:  # type: ignore[attr-defined]
            stop_gracefully(process, 20)  # type: ignore[arg-type]
    for root in roots:
        shutil.rmtree(root, ignore_errors=True)


def _submit(shared: dict[str, str], monkeypatch: pytest.MonkeyPatch, sleep_s: float) -> str:
    configure(monkeypatch, **shared)
    upgrade()
    with session_scope() as session:
        files = {
            "exercise.toml": 'title = "Add on a GPU"\nkind = "code"\nframework = "python"\nqueue = "gpu"\n'
            "[limits]\ntimeout_s = 60\n",
            "prompt.md": "# Add on a GPU\n", "starter.py": "def add(a, b):\n    raise NotImplementedError\n",
            "solution.py": SLOW_SOLUTION.replace("SLEEP", str(sleep_s)),
            "tests/test_add.py": "def test_add(submission):\n    assert submission.add(1, 2) == 3\n",
        }  # fmt: skip
        exercise, _ = upsert_exercise(
            session=session, spec=ExerciseSpec.from_files(f"gpu-add-{uuid.uuid4().hex[:6]}", files)
        )
        user = session.scalar(select(User).where(User.email == "ada@example.com")) or create_user(
            session=session, email="ada@example.com", password="a long passphrase", role=Role.learner
        )
        session.flush()
        made = create_submission(session=session, user=user, exercise=session.get(Exercise, exercise.id),
                                 code=files["solution.py"], max_bytes=65536)  # fmt: skip
        submission_id = made.id
    dispatcher = CeleryDispatcher(get_settings())
    try:
        dispatcher.dispatch(submission_id, "gpu")
    finally:
        dispatcher.shutdown()
    return submission_id


def _row(submission_id: str) -> Submission:
    with session_scope() as session:
        row = session.get(Submission, submission_id)
        assert row is not None
        session.expunge(row)
        return row


def test_a_host_whose_gpu_is_gone_gives_its_job_to_a_working_host(
    shared: dict[str, str], hosts: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    start = hosts["start"]
    _broken, broken_log = start("broken", working=False)  # type: ignore[operator]
    assert "GPU 0 takes no job: its device node /dev/nvidia0 is gone" in broken_log.read_text()
    submission_id = _submit(shared, monkeypatch, sleep_s=0)
    wait_for(lambda: b"stops taking gpu jobs" in broken_log.read_bytes(), timeout_s=60)
    row = _row(submission_id)
    assert (row.status, row.attempts) == (SubmissionStatus.queued, 0)  # given back, the try not counted

    def failed_in_beats() -> list[dict[str, object]]:
        with session_scope() as session:  # the dashboard's source: the broken host's beat names the failed GPU
            return [b.gpus for b in session.scalars(select(WorkerBeat)) if b.gpus and b.gpus.get("failed")]

    wait_for(lambda: failed_in_beats() != [], timeout_s=60)  # its next heartbeat carries it
    assert failed_in_beats()[0]["failed"] == {"0": "its device node /dev/nvidia0 is gone"}
    start("working", working=True)  # type: ignore[operator]
    wait_for(lambda: _row(submission_id).status is SubmissionStatus.graded, timeout_s=120)
    graded = _row(submission_id)
    assert graded.verdict is Verdict.passed and graded.attempts == 1


def test_a_gpu_host_killed_mid_grading_loses_nothing(
    shared: dict[str, str], hosts: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    start = hosts["start"]
    first, _ = start("first", working=True)  # type: ignore[operator]
    submission_id = _submit(shared, monkeypatch, sleep_s=20)
    wait_for(lambda: _row(submission_id).status is SubmissionStatus.running, timeout_s=60)
    first.kill()  # type: ignore[attr-defined]  # SIGKILL: no shutdown, its lease simply stops being renewed
    first.wait()  # type: ignore[attr-defined]
    start("second", working=True)  # type: ignore[operator]
    wait_for(lambda: _row(submission_id).status is SubmissionStatus.graded, timeout_s=180)
    graded = _row(submission_id)
    assert graded.verdict is Verdict.passed and graded.attempts == 2  # the killed try, then the one that counted
