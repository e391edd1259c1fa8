"""docker-compose.yml brought up for real: a learner's submission, an example run and an instructor check graded
through API → Redis → the grading host (worker-cpu: the local backend's warm sandboxes in its container), then a
submission through the docker-pair worker in its place (profile docker-pair: grading containers), then ``down -v``.
On the way a second grading host joins and one of the two is killed mid-burst: nothing may be lost, and all of
it must be settled within 30 s of the kill.

Needs a Docker engine, compose, and the images of docker/build-images (scripts/test builds them); without them
the test skips, unless ``GPULAB_REQUIRE_DOCKER=1`` (CI) makes that a failure. The project gets a name, a free
loopback port and a job folder of its own, so it never meets another bring-up or the host's own PostgreSQL and
Redis (compose publishes neither). Whatever happens, the project's containers and volumes are removed at the
end; on a failure the services' logs are printed first.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.deploy.compose import compose_command, unavailable
from tests.support import wait_for
from worker.core.config import REPO_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.docker]

IMAGES = ("gpulab/app:latest", "gpulab/postgres:15", "gpulab/redis:7", "gpulab/grader:cpu", "gpulab/grading-host:cpu")
SLUG = "python-split-batch"
EXERCISE = REPO_ROOT / "exercises" / SLUG
GRADER = "gpulab/grader:cpu"
UP_TIMEOUT_S = 180.0
GRADE_TIMEOUT_S = 120.0
BURST = 12  # submissions in flight when a grading host is killed
SETTLE_AFTER_KILL_S = 30.0  # issue 25: a dead host's work is settled by another within this


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _require_engine_and_images() -> None:
    try:
        info = subprocess.run(["docker", "info"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        unavailable(f"no Docker engine answers ({exc}); start one with scripts/dockerd")
    if info.returncode != 0:
        unavailable("no Docker engine answers; start one with scripts/dockerd")
    missing = [i for i in IMAGES if subprocess.run(["docker", "image", "inspect", i], capture_output=True).returncode]
    if missing:
        unavailable(f"images {', '.join(missing)} are not built; run docker/build-images")


class Deployment:
    """One compose project of docker-compose.yml, driven through the compose command line."""

    def __init__(self, project: str, env: dict[str, str], port: int) -> None:
        self.project = project
        self.env = env
        self.url = f"http://127.0.0.1:{port}"
        # The docker-pair file adds only profiled services: the default `up` starts the stack as shipped.
        self.base = [*compose_command(), "-p", project, "-f", str(REPO_ROOT / "docker-compose.yml"),
                     "-f", str(REPO_ROOT / "docker-compose.docker-pair.yml"),
                     "--project-directory", str(REPO_ROOT)]  # fmt: skip

    def compose(self, *args: str, stdin: str | None = None, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
        """Run one compose command; raise with its output when it fails."""
        result = subprocess.run(
            [*self.base, *args], input=stdin, capture_output=True, text=True, env=self.env, timeout=timeout_s
        )
        assert result.returncode == 0, f"compose {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
        return result

    def health(self, service: str) -> str:
        """Return the engine's health status of ``service``'s container."""
        (container,) = self.compose("ps", "-q", service).stdout.split()
        return subprocess.run(
            ["docker", "inspect", "-f", "{{.State.Health.Status}}", container], capture_output=True, text=True
        ).stdout.strip()

    def add_user(self, email: str, role: str) -> str:
        """Create an account inside the API container, as an operator would; return its password."""
        password = secrets.token_urlsafe(18)
        result = self.compose("exec", "-T", "api", "gpulab", "user", "add", email, "--role", role, "--password-stdin",
                              stdin=password + "\n")  # fmt: skip
        assert f"created {role} {email}" in result.stdout
        return password

    def leftovers(self) -> list[str]:
        """Return the containers and volumes of this project that still exist."""
        label = f"label=com.docker.compose.project={self.project}"
        found = []
        for kind in (["ps", "-a"], ["volume", "ls"]):
            out = subprocess.run(["docker", *kind, "-q", "--filter", label], capture_output=True, text=True).stdout
            found += out.split()
        return found


@contextmanager
def deployed(tmp_path: Path) -> Iterator[Deployment]:
    """Bring the stack up and wait until it is ready; always take it down again, volumes included."""
    _require_engine_and_images()
    port = _free_port()
    jobs = tmp_path / "jobs"  # the workers' GPULAB_JOBS_DIR: same path on the host and in them
    jobs.mkdir()
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("GPULAB_", "POSTGRES_", "COMPOSE_"))}
    env = {
        **clean,
        "GPULAB_SECRET_KEY": secrets.token_urlsafe(48),
        "POSTGRES_PASSWORD": secrets.token_urlsafe(24),
        "GPULAB_HOST": "127.0.0.1",
        "GPULAB_PORT": str(port),
        "GPULAB_COOKIE_SECURE": "false",  # plain HTTP on loopback: a Secure cookie would never come back
        "GPULAB_JOBS_DIR": str(jobs),
        # Warm container pairs for plain Python only: this test's exercise. All kinds would import torch and
        # TensorFlow in a dozen containers on the CI machine's two cores while the test runs.
        "GPULAB_WARM_POOLS": "python",
        # compose reads the seccomp profile relative to the directory it runs in; this test may run elsewhere.
        "GPULAB_GRADING_HOST_SECCOMP": str(REPO_ROOT / "docker" / "grading-host" / "seccomp.json"),
    }
    deployment = Deployment(f"gpulab-ci-{os.getpid()}", env, port)
    started = time.monotonic()
    try:
        deployment.compose("up", "-d", "--no-build", timeout_s=UP_TIMEOUT_S)
        _wait_ready(deployment)
        print(f"compose: up and ready in {time.monotonic() - started:.1f} s")  # shown with -s or on failure
        yield deployment
    except (pytest.skip.Exception, pytest.xfail.Exception):
        raise
    except BaseException:
        logs = subprocess.run([*deployment.base, "logs", "--no-color", "--tail", "300"], capture_output=True,
                              text=True, env=env, timeout=60)  # fmt: skip
        print(f"==== docker compose logs ({deployment.project})\n{logs.stdout}{logs.stderr}")
        raise
    finally:
        down = time.monotonic()
        subprocess.run([*deployment.base, "down", "-v", "--remove-orphans", "--timeout", "20"], capture_output=True,
                       env=env, timeout=180)  # fmt: skip
        print(f"compose: down -v in {time.monotonic() - down:.1f} s")
        # Warm pairs are the workers' own containers, not the project's: a worker stopped before it removed
        # them (down's timeout) leaves them to a later check(); later suites count containers, so go now.
        warm = subprocess.run(["docker", "ps", "-aq", "--filter", "label=gpulab.warm"], capture_output=True,
                              text=True).stdout.split()  # fmt: skip
        if warm:
            print(f"compose: removing {len(warm)} warm grading containers left by the workers")
            subprocess.run(["docker", "rm", "-f", *warm], capture_output=True, timeout=60)


def _wait_ready(deployment: Deployment) -> None:
    """Wait until /readyz answers 200: database, broker and a live worker on every queue and lane."""
    deadline = time.monotonic() + UP_TIMEOUT_S
    last = "no answer yet"
    while time.monotonic() < deadline:
        try:
            response = httpx.get(f"{deployment.url}/readyz", timeout=5)
            if response.status_code == 200 and response.json()["ready"]:
                return
            last = f"{response.status_code} {response.text[:500]}"
        except httpx.HTTPError as exc:
            last = repr(exc)
        time.sleep(1)
    raise AssertionError(f"the stack was not ready within {UP_TIMEOUT_S:.0f} s: {last}")


def _login(deployment: Deployment, email: str, password: str) -> httpx.Client:
    client = httpx.Client(base_url=deployment.url, timeout=60)
    response = client.post("/api/auth/login", json={"email": email, "password": password})
    assert response.status_code == 200, response.text
    return client


def _settle(client: httpx.Client, url: str, done: set[str]) -> dict[str, Any]:
    """Poll ``url`` until its ``status`` is one of ``done``; return the last answer."""
    deadline = time.monotonic() + GRADE_TIMEOUT_S
    while True:
        body: dict[str, Any] = client.get(url).raise_for_status().json()
        if body["status"] in done:
            return body
        assert time.monotonic() < deadline, f"{url} still {body['status']} after {GRADE_TIMEOUT_S:.0f} s: {body}"
        time.sleep(0.5)


def _live_cpu_workers(deployment: Deployment) -> int:
    """Return how many live grading processes /readyz counts on the ``cpu`` queue."""
    checks = httpx.get(f"{deployment.url}/readyz", timeout=10).json()["checks"]
    (cpu,) = [c for c in checks if c["name"] == "queue:cpu"]
    match = re.match(r"(\d+) live worker", cpu["detail"])
    return int(match.group(1)) if match else 0


def _grader_filters() -> list[str]:
    """Return ``docker events`` filters for containers of the grading image, made by its name or by its id.

    The docker backend creates its containers from the image's id (so a rebuild under way cannot swap it), and
    an event's ``image`` is then that id, which a filter by name never matches.
    """
    image_id = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", GRADER], capture_output=True,
                              text=True, timeout=60).stdout.strip()  # fmt: skip
    assert image_id, f"{GRADER} is not built"
    return ["--filter", f"image={GRADER}", "--filter", f"image={image_id}"]


def _grader_starts(since: float) -> int:
    """Count grading containers started since ``since`` (epoch seconds) until now."""
    out = subprocess.run(
        ["docker", "events", "--since", f"{since:.3f}", "--until", f"{time.time():.3f}", "--filter", "type=container",
         "--filter", "event=start", *_grader_filters(), "--format", "{{.ID}}"],
        capture_output=True, text=True, timeout=60,
    ).stdout  # fmt: skip
    return len(out.split())


def _grader_runs(since: float, *, at_least: int, guard_s: float = GRADE_TIMEOUT_S) -> int:
    """Wait until ``at_least`` grading containers have ended (``die``) since ``since`` (epoch seconds); count them.

    Ends, not starts: a job may take a warm pair started before ``since``, but every job's containers end with
    it, fresh or warm, and the pair's replacement starting afterwards is not this job's. The engine's event
    stream is followed (``--since`` replays what already happened, then it stays open), so the wait lasts as
    long as the containers take to end on a loaded machine; ``guard_s`` only names a hang, it is not a window
    the events must fit in.
    """
    command = ["docker", "events", "--since", f"{since:.3f}", "--filter", "type=container", "--filter", "event=die",
               *_grader_filters(), "--format", "{{.ID}}"]  # fmt: skip
    ended: set[str] = set()
    enough = threading.Event()
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) as events:

        def follow() -> None:
            assert events.stdout is not None
            for line in events.stdout:
                if line.strip():
                    ended.add(line.strip())
                if len(ended) >= at_least:
                    enough.set()
            enough.set()  # the stream closed (the engine went away): nothing more will come

        threading.Thread(target=follow, daemon=True).start()
        try:
            assert enough.wait(guard_s), f"only {len(ended)} of {at_least} grading containers ended in {guard_s:.0f} s"
        finally:
            events.kill()
    return len(ended)


@pytest.mark.timeout(600)  # above the sum of this test's own deadlines, so they name what hung, and down -v runs
def test_compose_stack_grades_a_submission_an_example_run_and_a_check(tmp_path: Path) -> None:
    solution = (EXERCISE / "solution.py").read_text()
    wrong = (EXERCISE / "wrong" / "round_robin.py").read_text()
    with deployed(tmp_path) as stack:
        assert stack.health("postgres") == "healthy" and stack.health("redis") == "healthy"
        learner = _login(stack, "learner@example.com", stack.add_user("learner@example.com", "learner"))
        instructor = _login(stack, "instructor@example.com", stack.add_user("instructor@example.com", "instructor"))

        # A submission: API → Redis → the grading host → a judge and a subject forked from its warm templates.
        since = time.time()
        ids = {}
        for name, code in (("right", solution), ("wrong", wrong)):
            created = learner.post(f"/api/exercises/{SLUG}/submissions", json={"code": code})
            assert created.status_code == 202, created.text
            ids[name] = created.json()["id"]
        right = _settle(learner, f"/api/submissions/{ids['right']}", {"graded", "error"})
        assert (right["status"], right["verdict"]) == ("graded", "passed"), right
        assert right["score"] == right["max_score"] > 0 and right["tests"]
        failed = _settle(learner, f"/api/submissions/{ids['wrong']}", {"graded", "error"})
        assert (failed["status"], failed["verdict"]) == ("graded", "failed"), failed
        assert _grader_starts(since) == 0  # graded in the grading host's own sandboxes, no grading container

        # An example run: the API holds no sandbox, so it can only pass through a worker's example lane.
        run = learner.post(f"/api/exercises/{SLUG}/runs", json={"code": solution})
        assert run.status_code == 200, run.text
        outcome = run.json()
        assert (outcome["id"], outcome["status"], outcome["verdict"]) == ("", "graded", "passed"), outcome
        assert outcome["tests"] and all(t["outcome"] == "passed" for t in outcome["tests"])

        # An instructor check of the published version, started from its page's form like a browser would.
        exercises = instructor.get("/api/instructor/exercises").raise_for_status().json()
        (number,) = [e["current_version"] for e in exercises if e["slug"] == SLUG]
        page_url = f"/instructor/exercises/{SLUG}/versions/{number}"
        token = re.search(r'name="csrf_token" value="([^"]+)"', instructor.get(page_url).text)
        assert token, "the version page has no check form"
        started = instructor.post(f"{page_url}/check", data={"csrf_token": token.group(1)})
        assert started.status_code == 303, started.text
        check_url = re.search(r'data-url="(/api/instructor/checks/\d+)"', instructor.get(page_url).text)
        assert check_url, "the version page shows no check after starting one"
        check = _settle(instructor, check_url.group(1), {"passed", "failed", "error"})
        assert check["status"] == "passed" and check["problems"] == [], check
        files = 1 + len(list((EXERCISE / "right").glob("*.py"))) + len(list((EXERCISE / "wrong").glob("*.py")))
        assert check["done"] == check["total"] == files
        assert all(line.startswith("ok ") for line in check["lines"]), check["lines"]

        # The engine's own probe of the API (/healthz every 15 s) agrees.
        wait_for(lambda: stack.health("api") == "healthy", timeout_s=60, interval_s=1)

        # A second grading host joins, and one of the two is killed mid-burst: nothing is lost, and the other
        # settles all of it within SETTLE_AFTER_KILL_S of the kill (leases of 10 s, docker-compose.yml).
        one_host = _live_cpu_workers(stack)
        stack.compose("up", "-d", "--no-build", "--scale", "worker-cpu=2", "worker-cpu", timeout_s=UP_TIMEOUT_S)
        wait_for(lambda: _live_cpu_workers(stack) > one_host, timeout_s=UP_TIMEOUT_S, interval_s=1)
        hosts = stack.compose("ps", "-q", "worker-cpu").stdout.split()
        assert len(hosts) == 2, hosts
        burst = []
        for _ in range(BURST):
            created = learner.post(f"/api/exercises/{SLUG}/submissions", json={"code": solution})
            assert created.status_code == 202, created.text
            burst.append(created.json()["id"])
        killed_at = time.monotonic()
        subprocess.run(["docker", "kill", hosts[0]], capture_output=True, check=True, timeout=60)
        for submission_id in burst:
            settled = _settle(learner, f"/api/submissions/{submission_id}", {"graded", "error"})
            assert (settled["status"], settled["verdict"]) == ("graded", "passed"), settled
        took_s = time.monotonic() - killed_at
        print(f"compose: {BURST} submissions settled {took_s:.1f} s after one of two grading hosts was killed")
        assert took_s <= SETTLE_AFTER_KILL_S, f"settled only {took_s:.1f} s after the kill"

        # The nightly backup service takes one now, while submissions are in flight, and it restores (here into
        # a SQLite file inside that container: PostgreSQL onto the embedded default).
        for _ in range(4):
            assert learner.post(f"/api/exercises/{SLUG}/submissions", json={"code": solution}).status_code == 202
        taken = stack.compose("exec", "-T", "backup", "gpulab", "backup", "/var/lib/gpulab/backups", "--keep", "3")
        assert taken.returncode == 0 and "wrote /var/lib/gpulab/backups/gpulab-" in taken.stdout, taken.stderr
        (made,) = re.findall(r"wrote (\S+\.zip)", taken.stdout)
        restored = stack.compose("exec", "-T", "backup", "gpulab", "restore", made, "--database-url",
                                 "sqlite:////tmp/restored.db")  # fmt: skip
        assert restored.returncode == 0 and "migrated to the newest schema" in restored.stdout, restored.stderr

        # The docker-pair path, in place of the grading host: a judge and a subject container on the host's engine.
        stack.compose("stop", "worker-cpu")
        stack.compose("--profile", "docker-pair", "up", "-d", "--no-build", "worker-cpu-docker", timeout_s=UP_TIMEOUT_S)
        _wait_ready(stack)
        since = time.time()
        created = learner.post(f"/api/exercises/{SLUG}/submissions", json={"code": solution})
        assert created.status_code == 202, created.text
        paired = _settle(learner, f"/api/submissions/{created.json()['id']}", {"graded", "error"})
        assert (paired["status"], paired["verdict"]) == ("graded", "passed"), paired
        assert _grader_runs(since, at_least=2) >= 2  # the grading's two containers ended: none in the app's image
    assert stack.leftovers() == [], "down -v left containers or volumes behind"
