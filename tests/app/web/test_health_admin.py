"""The admin dashboard and ``/api/admin/liveness``: worker liveness and stranded submissions."""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

import pytest
from sqlalchemy.orm import Session

from app.domain.models import Role, Submission, SubmissionStatus, User, WorkerBeat
from app.domain.operations import liveness, metrics
from app.settings import Settings
from tests.conftest import TinyExercise

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres


def _ago(seconds: float) -> datetime:
    return datetime.now(UTC) - timedelta(seconds=seconds)


WARM = [
    {"kind": "torch, 2 virtual CUDA devices", "warm": 2, "size": 2, "hits": 30, "misses": {"first use": 1},
     "memory_mb": 612, "cold": ""},
    {"kind": "tensorflow", "warm": 0, "size": 2, "hits": 3, "misses": {"budget": 4, "first use": 1},
     "memory_mb": 0, "cold": "budget"},
    {"kind": "broken", "warm": "many"},  # another process wrote it: read, never trusted
]  # fmt: skip


def beat(db: Session, name: str, queues: list[str], *, seen_ago_s: float, stopped: bool = False) -> None:
    seen = _ago(seen_ago_s)
    db.add(WorkerBeat(name=name, queues=queues, hostname="gpu-node-7", pid=77, sandbox="docker", busy=1,
                      redispatched=4, started_at=seen - timedelta(hours=1), last_seen_at=seen,
                      stopped_at=seen if stopped else None, warm=WARM))  # fmt: skip


def submission(db: Session, ex: TinyExercise, status: SubmissionStatus, **fields: object) -> str:
    row = Submission(exercise_version_id=ex.exercise.current_version_id, code="x", status=status, **fields)
    db.add(row)
    db.flush()
    return row.id


@pytest.fixture
def scene(db_session: Session, tiny_exercise: TinyExercise, settings: Settings) -> dict[str, str]:
    """A live, a dead and a stopped worker; a stranded running, a stuck queued, and two healthy submissions."""
    beat(db_session, "celery@alive", ["cpu"], seen_ago_s=2)
    beat(db_session, "celery@crashed", ["cpu", "gpu"], seen_ago_s=settings.worker_stale_s + 300)
    beat(db_session, "celery@retired", ["cpu"], seen_ago_s=10, stopped=True)
    lease = settings.grading_lease_s
    ids = {
        "stranded": submission(db_session, tiny_exercise, SubmissionStatus.running, created_at=_ago(600),
                               started_at=_ago(500), heartbeat_at=_ago(lease + 120), attempts=1),
        "stuck": submission(db_session, tiny_exercise, SubmissionStatus.queued, created_at=_ago(90)),
        "renewing": submission(db_session, tiny_exercise, SubmissionStatus.running, created_at=_ago(600),
                               started_at=_ago(500), heartbeat_at=_ago(3), attempts=1),
        "fresh": submission(db_session, tiny_exercise, SubmissionStatus.queued, created_at=_ago(5)),
    }  # fmt: skip
    db_session.commit()
    return ids


def _row(page: str, table_id: str, needle: str) -> str:
    table = page.split(f'id="{table_id}"', 1)[1].split("</table>", 1)[0]
    rows = [r for r in re.findall(r"<tr.*?</tr>", table, flags=re.S) if needle in r]
    assert len(rows) == 1, (needle, table)
    return html.unescape(re.sub(r"<[^>]+>", " ", rows[0]))


def test_dashboard_shows_dead_workers_and_stranded_submissions(admin_client: TestClient, scene: dict[str, str]) -> None:
    page = admin_client.get("/admin")
    assert page.status_code == 200
    text = page.text
    dead = _row(text, "worker-table", "celery@crashed")
    assert "dead" in dead.split() and "cpu, gpu" in dead and "gpu-node-7 pid 77" in dead
    # At least the 5 minutes set up (a slow machine may have let one more pass before the page was drawn).
    assert int(re.search(r"no beat for (\d+) min", dead).group(1)) >= 5  # type: ignore[union-attr]
    assert "live" in _row(text, "worker-table", "celery@alive").split()
    assert "stopped" in _row(text, "worker-table", "celery@retired").split()

    # What each live worker keeps warm, and why a kind is cold (dead and stopped workers keep nothing warm).
    torch = " ".join(_row(text, "warm-table", "torch, 2 virtual CUDA devices").split())
    assert "celery@alive" in torch and "2 / 2" in torch and "1 first use" in torch and "96.8%" in torch
    assert "612 MB" in torch
    tf = " ".join(_row(text, "warm-table", "tensorflow").split())
    assert "0 / 2" in tf and "4 budget, 1 first use" in tf and "37.5%" in tf and tf.endswith("budget")
    warm_table = text.split('id="warm-table"', 1)[1].split("</table>", 1)[0]
    assert "celery@crashed" not in warm_table and "broken" not in warm_table

    stranded = _row(text, "stranded-table", scene["stranded"][:12])
    assert "running" in stranded and "stopped renewing the lease" in stranded
    assert int(re.search(r"(\d+) min", stranded).group(1)) >= 2  # type: ignore[union-attr]  # its only age
    assert "no worker picked it up" in _row(text, "stranded-table", scene["stuck"][:12])
    table = text.split('id="stranded-table"', 1)[1].split("</table>", 1)[0]
    assert scene["renewing"][:12] not in table and scene["fresh"][:12] not in table
    assert f'href="/instructor/submissions/{scene["stranded"]}"' in table
    coverage = text.split('id="queue-coverage"', 1)[1].split("</ul>", 1)[0]
    assert "<strong>cpu</strong>: 1 live worker" in coverage  # the live worker serves cpu; no GPU exercise
    assert '<strong>examples-cpu</strong>: <span class="error">no live worker' in coverage
    assert "<strong>gpu</strong>" not in coverage


def test_dashboard_says_when_nothing_is_stranded(admin_client: TestClient, tiny_exercise: TinyExercise) -> None:
    page = admin_client.get("/admin").text
    assert 'id="stranded-table"' not in page
    assert "None: every running grading renews its lease" in page.split('id="stranded"', 1)[1]


def test_liveness_api_reports_workers_and_stranded_work(
    admin_client: TestClient, scene: dict[str, str], settings: Settings
) -> None:
    response = admin_client.get("/api/admin/liveness")
    assert response.status_code == 200, response.text
    body = response.json()
    states = {w["name"]: w["state"] for w in body["workers"]}
    assert states["celery@alive"] == "live" and states["celery@crashed"] == "dead"
    assert states["celery@retired"] == "stopped"
    crashed = next(w for w in body["workers"] if w["name"] == "celery@crashed")
    assert crashed["queues"] == ["cpu", "gpu"] and crashed["redispatched"] == 4
    assert crashed["seen_ago_s"] >= settings.worker_stale_s + 300
    assert body["required_queues"] == ["cpu", "examples-cpu"]
    assert body["live_workers"]["cpu"] >= 1 and body["live_workers"]["examples-cpu"] == 0
    stranded = {s["id"]: s for s in body["stranded"]}
    assert set(stranded) >= {scene["stranded"], scene["stuck"]}
    assert scene["renewing"] not in stranded and scene["fresh"] not in stranded
    assert stranded[scene["stranded"]]["status"] == "running" and stranded[scene["stuck"]]["status"] == "queued"
    assert stranded[scene["stranded"]]["age_s"] >= settings.grading_lease_s + 120
    assert body["stranded_total"] == len(body["stranded"])


def test_liveness_api_is_for_admins_only(
    client: TestClient, make_user: Callable[..., User], login: Callable[..., None]
) -> None:
    assert client.get("/api/admin/liveness").status_code == 401
    login(client, make_user(Role.instructor))
    assert client.get("/api/admin/liveness").status_code == 403


def test_openapi_declares_the_liveness_schema(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    ok = spec["paths"]["/api/admin/liveness"]["get"]["responses"]["200"]["content"]["application/json"]
    assert ok["schema"] == {"$ref": "#/components/schemas/LivenessOut"}
    worker = spec["components"]["schemas"]["WorkerState"]["properties"]
    assert worker["state"]["enum"] == ["live", "dead", "stopped"]


def test_dashboard_and_metrics_say_which_gpus_failed(
    admin_client: TestClient, db_session: Session, settings: Settings
) -> None:
    seen = _ago(1)
    for name, failed in (("celery@gpu-a", {"1": "its device node /dev/nvidia2 is gone"}),
                         ("celery@gpu-b", {"0": "the driver marks it lost", "1": "nvidia-smi reports it ERR!"}),
                         ("celery@gpu-c", {})):  # fmt: skip
        db_session.add(WorkerBeat(name=name, queues=["gpu"], hostname="node", pid=1, sandbox="local", busy=0,
                                  redispatched=0, started_at=seen, last_seen_at=seen,
                                  gpus={"ids": ["0", "1"], "per_job": 1, "failed": failed}))  # fmt: skip
    db_session.add(WorkerBeat(name="celery@gpu-garbled", queues=["gpu"], hostname="node", pid=1, sandbox="local",
                              busy=0, redispatched=0, started_at=seen, last_seen_at=seen, gpus={"ids": 7}))  # fmt: skip
    db_session.commit()
    page = admin_client.get("/admin").text
    assert "1 of 2 working" in _row(page, "gpu-table", "celery@gpu-a")
    assert "its device node /dev/nvidia2 is gone" in _row(page, "gpu-table", "celery@gpu-a")
    assert "takes no GPU job" in _row(page, "gpu-table", "celery@gpu-b")
    assert "all working" in _row(page, "gpu-table", "celery@gpu-c")
    assert "celery@gpu-garbled" not in page.split('id="gpu-table"', 1)[1].split("</table>", 1)[0]
    live = [w for w in liveness.workers(session=db_session, settings=settings, now=datetime.now(UTC))
            if w.name.startswith("celery@gpu")]  # fmt: skip
    samples = {(s.name, tuple(sorted(s.labels.items())), s.value)
               for family in metrics._gpu_families(live) for s in family.samples}  # fmt: skip
    assert ("gpulab_gpus", (("worker", "celery@gpu-a"),), 2.0) in samples
    failed = (("gpu", "0"), ("reason", "the driver marks it lost"), ("worker", "celery@gpu-b"))
    assert ("gpulab_gpus_failed", failed, 1.0) in samples
    assert not [s for s in samples if ("worker", "celery@gpu-c") in s[1] and s[0] == "gpulab_gpus_failed"]
