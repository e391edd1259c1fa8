"""`gpulab serve --workers 2` on PostgreSQL + Redis with a real `gpulab worker`: the processes share their state.

Every request goes over a fresh HTTP connection, so either API process may answer it; the access log names
the pid that did (``gpulab serve`` logs it with several workers), and each test checks both processes took part.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import httpx
import pytest
import redis

from app.domain.exercises.example_runs import RUNS_PER_USER
from app.domain.platform.ratelimit import KEY_PREFIX
from tests.support import (
    bank_file,
    child_env,
    free_port,
    fresh_postgres_db,
    require_service,
    start_gpulab,
    stop_gracefully,
    wait_for,
)

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.redis]

REDIS_URL = "redis://127.0.0.1:6379/13"
PASSWORD = "a-fine-long-password"
LEARNERS = ("ada@example.com", "bob@example.com", "cy@example.com", "dee@example.com")
SLUG = "python-split-batch"
STAFF = (("ivy@example.com", "instructor"), ("abe@example.com", "admin"))
MAX_FAILURES = 5
EVENTS_POLL_S = 30.0  # the streams' safety-net poll: anything sooner than this came through news
VOLATILE_KEYS = {"now", "last_seen_at", "seen_ago_s", "age_s", "busy", "redispatched"}  # the clock moves
ROUNDS, PER_ROUND = 15, 4  # at most 60 requests to see both processes answer
ACCESS = re.compile(r'\[(\d+)\] [\d.]+:\d+ - "(\w+) (\S+) HTTP/[\d.]+" (\d+)')


@dataclass
class Stack:
    base: str
    log: Path

    def mark(self) -> int:
        """Return the current end of the server log, to read only what a test caused."""
        return self.log.stat().st_size

    def answered(self, since: int, method: str, path: str, status: int) -> list[int]:
        """Return the pid of every access line since ``since`` for ``method path`` answered ``status``."""
        text = self.log.read_bytes()[since:].decode(errors="replace")
        return [
            int(pid)
            for pid, m, p, code in ACCESS.findall(text)
            if (m, p.split("?")[0], int(code)) == (method, path, status)
        ]

    def client(self, cookie: str | None = None) -> httpx.Client:
        """Return a client that opens a new connection for every request."""
        client = httpx.Client(base_url=self.base, timeout=60, limits=httpx.Limits(max_keepalive_connections=0))
        if cookie:
            client.cookies.set("gpulab_session", cookie)
        return client

    def login(self, email: str) -> str:
        with self.client() as client:
            response = client.post("/api/auth/login", json={"email": email, "password": PASSWORD})
            assert response.status_code == 200, response.text
            cookie = client.cookies.get("gpulab_session")
        assert cookie
        return cookie


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """PostgreSQL, Redis db 13, one Celery worker and `gpulab serve --workers 2`; yield how to reach them."""
    require_service("PostgreSQL", "127.0.0.1", 5432)
    require_service("Redis", "127.0.0.1", 6379)
    data = tmp_path_factory.mktemp("serve-workers")
    env = child_env(
        mode="dev",
        data_dir=str(data),
        secret_key="w" * 48,
        database_url=fresh_postgres_db("gpulab_serve_workers"),
        broker_url=REDIS_URL,
        login_max_failures=str(MAX_FAILURES),
        events_poll_s=str(EVENTS_POLL_S),
    )
    env["PYTHONUNBUFFERED"] = "1"  # access lines reach the log as they happen
    redis.Redis.from_url(REDIS_URL).flushdb()
    steps: list[tuple[list[str], str | None]] = [(["db", "upgrade"], None), (["exercises", "sync"], None)]
    steps += [(["user", "add", email, "--password-stdin"], PASSWORD + "\n") for email in LEARNERS]
    steps += [(["user", "add", email, "--role", role, "--password-stdin"], PASSWORD + "\n") for email, role in STAFF]
    for args, stdin in steps:
        done = subprocess.run(["gpulab", *args], env=env, input=stdin, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr

    worker_log, serve_log, port = data / "worker.log", data / "serve.log", free_port()
    worker = start_gpulab(["worker", "--queues", "cpu", "--concurrency", "2"], env, worker_log)
    server = start_gpulab(["serve", "--workers", "2", "--port", str(port)], env, serve_log)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        for proc, log in ((worker, worker_log), (server, serve_log)):
            if proc.poll() is not None:
                pytest.fail(log.read_text(errors="replace"))
        try:
            started = serve_log.read_text(errors="replace").count("Application startup complete") == 2
            return started and b"ready" in worker_log.read_bytes() and httpx.get(f"{base}/login").status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, timeout_s=90, interval_s=0.3)
        yield Stack(base=base, log=serve_log)
    finally:
        stop_gracefully(server, 30)
        stop_gracefully(worker, 30)


def _both(pids: list[int]) -> None:
    assert len(set(pids)) == 2, f"expected both API processes among {pids}"


def _until_both_answer(
    stack: Stack, since: int, method: str, path: str, send: Callable[[], httpx.Response], status: int
) -> None:
    """Send ``send()`` (a fresh connection each) in concurrent rounds until both processes answered ``status``.

    The kernel hands a new connection to whichever process accepts first, and an idle pair often lets one
    take them all; concurrent requests keep both busy. Every answer must have ``status``.
    """
    for _ in range(ROUNDS):
        with ThreadPoolExecutor(PER_ROUND) as pool:
            answers = list(pool.map(lambda _i: send(), range(PER_ROUND)))
        for answer in answers:
            assert answer.status_code == status, answer.text
        if len(set(stack.answered(since, method, path, status))) == 2:
            return
    _both(stack.answered(since, method, path, status))


def _follow(stack: Stack, cookie: str, submission_id: str) -> list[tuple[float, dict[str, object]]]:
    """Read the submission's SSE stream to its end; return (arrival wall time, payload) per status event."""
    events: list[tuple[float, dict[str, object]]] = []
    with stack.client(cookie) as client, client.stream("GET", f"/api/submissions/{submission_id}/events") as stream:
        assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
        for line in stream.iter_lines():
            if line.startswith("data:"):
                events.append((time.time(), json.loads(line[5:])))
    return events


def test_the_api_flows_work_and_a_worker_verdict_reaches_the_stream_through_news(stack: Stack) -> None:
    since = stack.mark()
    cookie = stack.login("ada@example.com")
    with stack.client(cookie) as client:
        catalogue = client.get("/api/exercises")
        assert catalogue.status_code == 200 and SLUG in {e["slug"] for e in catalogue.json()}
        assert client.get(f"/api/exercises/{SLUG}").json()["slug"] == SLUG

    for path, verdict in (("solution.py", "passed"), ("wrong/round_robin.py", "failed")):
        with stack.client(cookie) as client:
            created = client.post(f"/api/exercises/{SLUG}/submissions", json={"code": bank_file(SLUG, path)})
        assert created.status_code == 202, created.text
        submission_id = created.json()["id"]
        opened = time.monotonic()
        events = _follow(stack, cookie, submission_id)
        took_s = time.monotonic() - opened

        first, (arrived, last) = events[0][1], events[-1]
        assert first["status"] in ("queued", "running"), "the stream opened before the grading ended"
        assert last["status"] == "graded" and last["verdict"] == verdict
        # The first read was at the stream's start and the next poll would come EVENTS_POLL_S later: the
        # verdict could only arrive this soon because the worker's news crossed processes through Redis.
        assert took_s < EVENTS_POLL_S - 5, f"the verdict took {took_s:.1f} s: it waited for the poll"
        finished = datetime.fromisoformat(str(last["finished_at"]).replace("Z", "+00:00")).timestamp()
        assert arrived - finished < 2.0, (
            f"the verdict reached the stream {arrived - finished:.2f} s after it was written"
        )

        with stack.client(cookie) as client:
            result = client.get(f"/api/submissions/{submission_id}").json()
            assert result["verdict"] == verdict and result["tests"] and result["device"]
            assert submission_id in {s["id"] for s in client.get("/api/me/submissions").json()}
        with stack.client(stack.login("bob@example.com")) as other:
            assert other.get(f"/api/submissions/{submission_id}").status_code == 404

    def catalogue() -> httpx.Response:
        with stack.client(cookie) as client:
            return client.get("/api/exercises")

    _until_both_answer(stack, since, "GET", "/api/exercises", catalogue, 200)  # both processes took part


def test_a_logout_is_honoured_by_whichever_process_answers(stack: Stack) -> None:
    cookie = stack.login("ada@example.com")

    def me() -> httpx.Response:
        with stack.client(cookie) as client:
            return client.get("/api/auth/me")

    _until_both_answer(stack, stack.mark(), "GET", "/api/auth/me", me, 200)

    with stack.client(cookie) as client:
        assert client.post("/api/auth/logout", headers={"Content-Type": "application/json"}).status_code == 204
    _until_both_answer(stack, stack.mark(), "GET", "/api/auth/me", me, 401)  # a copy of the logged-out cookie


def test_example_run_limit_is_shared_by_the_processes(stack: Stack) -> None:
    cookie = stack.login("cy@example.com")
    url = f"/api/exercises/{SLUG}/runs"
    since = stack.mark()
    for _ in range(RUNS_PER_USER):
        with stack.client(cookie) as client:
            run = client.post(url, json={"code": bank_file(SLUG, "solution.py")})
        assert run.status_code == 200, run.text
        assert run.json()["verdict"] == "passed"

    def run() -> httpx.Response:
        with stack.client(cookie) as client:
            refused = client.post(url, json={"code": "x = 1\n"})
        assert int(refused.headers.get("retry-after", 0)) >= 1, refused.text
        return refused

    # Neither process ran RUNS_PER_USER runs on its own, yet both refuse: they count together.
    _until_both_answer(stack, since, "POST", url, run, 429)
    assert len(stack.answered(since, "POST", url, 200)) == RUNS_PER_USER


def test_login_failures_are_limited_across_processes(stack: Stack) -> None:
    since = stack.mark()
    try:
        for _ in range(MAX_FAILURES):
            with stack.client() as client:
                wrong = client.post("/api/auth/login", json={"email": "dee@example.com", "password": "guess-guess"})
            assert wrong.status_code == 401

        def right_password() -> httpx.Response:
            with stack.client() as client:
                refused = client.post("/api/auth/login", json={"email": "dee@example.com", "password": PASSWORD})
            assert int(refused.headers.get("retry-after", 0)) >= 1, refused.text
            return refused

        # MAX_FAILURES failures in all, and both processes refuse even the right password.
        _until_both_answer(stack, since, "POST", "/api/auth/login", right_password, 429)
        assert len(stack.answered(since, "POST", "/api/auth/login", 401)) == MAX_FAILURES
    finally:  # the client IP is locked out too: forgive it, for whatever runs next against this Redis db
        client_redis = redis.Redis.from_url(REDIS_URL)
        keys = client_redis.keys(f"{KEY_PREFIX}:*")
        if keys:
            client_redis.delete(*keys)


def test_every_read_of_the_api_answers_the_same_from_either_process(stack: Stack) -> None:
    learner = stack.login("bob@example.com")
    with stack.client(learner) as client:
        created = client.post(f"/api/exercises/{SLUG}/submissions", json={"code": bank_file(SLUG, "solution.py")})
    assert created.status_code == 202, created.text
    submission_id = created.json()["id"]
    _follow(stack, learner, submission_id)  # graded by the worker
    reads = {
        learner: [
            "/api/auth/me", "/api/exercises", f"/api/exercises/{SLUG}", f"/api/exercises/{SLUG}/progress",
            f"/api/exercises/{SLUG}/attempts", "/api/me/progress", "/api/me/submissions",
            f"/api/submissions/{submission_id}", f"/api/submissions/{submission_id}/diff",
        ],
        stack.login("ivy@example.com"): [
            "/api/instructor/exercises", f"/api/instructor/exercises/{SLUG}/submissions",
            f"/api/instructor/submissions/{submission_id}/history",
        ],
        stack.login("abe@example.com"): ["/api/admin/stats", "/api/admin/users", "/api/admin/liveness"],
    }  # fmt: skip
    for cookie, paths in reads.items():
        for path in paths:
            since = stack.mark()
            bodies: list[object] = []

            def read(path: str = path, bodies: list[object] = bodies, cookie: str = cookie) -> httpx.Response:
                with stack.client(cookie) as client:
                    answer = client.get(path)
                if answer.status_code == 200:
                    bodies.append(_stable(answer.json()))
                return answer

            _until_both_answer(stack, since, "GET", path, read, 200)
            assert all(body == bodies[0] for body in bodies), f"{path}: the two processes disagree"


def _stable(body: object) -> object:
    """Drop what legitimately differs between two reads (the clock), keep everything else."""
    if isinstance(body, dict):
        return {k: _stable(v) for k, v in body.items() if k not in VOLATILE_KEYS}
    if isinstance(body, list):
        return [_stable(v) for v in body]
    return body
