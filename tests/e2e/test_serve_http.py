"""A learner's whole journey against a real `gpulab serve` process: log in, submit, watch SSE, see the verdict."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.e2e.conftest import PASSWORD
from tests.support import BANK, bank_file

pytestmark = pytest.mark.slow


def login(base: str, email: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=30)
    response = client.post("/api/auth/login", json={"email": email, "password": PASSWORD})
    assert response.status_code == 200, response.text
    return client


def follow_events(client: httpx.Client, submission_id: str) -> list[dict[str, object]]:
    """Read the SSE stream until it ends; return the status events' payloads."""
    events: list[dict[str, object]] = []
    with client.stream("GET", f"/api/submissions/{submission_id}/events", timeout=180) as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        for line in stream.iter_lines():
            if line.startswith("data:"):
                events.append(json.loads(line[5:]))
    return events


@pytest.mark.parametrize(
    ("slug", "path", "verdict"),
    [
        ("python-split-batch", "solution.py", "passed"),
        ("python-split-batch", "wrong/round_robin.py", "failed"),
        ("torch-unwrap-state-dict", "solution.py", "passed"),
        ("torch-unwrap-state-dict", "wrong/replace_everywhere.py", "failed"),
    ],
)
def test_submit_and_watch_the_verdict_arrive(live_server: str, slug: str, path: str, verdict: str) -> None:
    client = login(live_server, "ada@example.com")
    page = client.get(f"/exercises/{slug}")
    assert page.status_code == 200 and "<textarea" in page.text

    response = client.post(f"/api/exercises/{slug}/submissions", json={"code": bank_file(slug, path)})
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["status"] == "queued"

    events = follow_events(client, body["id"])
    assert events, "the event stream sent no status"
    assert events[-1]["status"] == "graded"
    assert events[-1]["verdict"] == verdict
    final = client.get(f"/api/submissions/{body['id']}").json()
    assert final["verdict"] == verdict and final["exercise"] == slug and final["exercise_version"] == 1
    assert final["tests"] and final["device"]
    if verdict == "passed":
        assert final["score"] == final["max_score"] > 0
    else:
        assert any(t["outcome"] != "passed" and t["message"] for t in final["tests"])

    mine = client.get("/api/me/submissions").json()
    assert body["id"] in {s["id"] for s in mine}
    other = login(live_server, "bob@example.com")
    assert other.get(f"/api/submissions/{body['id']}").status_code == 404


def test_every_shipped_exercise_is_listed(live_server: str) -> None:
    client = login(live_server, "ada@example.com")
    listed = {e["slug"] for e in client.get("/api/exercises").json()}
    assert listed == {p.parent.name for p in BANK.glob("*/exercise.toml")}
