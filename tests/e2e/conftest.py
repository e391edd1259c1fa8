"""End-to-end fixtures: a real `gpulab serve` process on SQLite, and a headless Chromium driven by Playwright.

``serve_gpulab`` migrates a fresh data folder, optionally syncs the real bank, adds users through the CLI
and serves on a free port; ``live_server`` is that with the bank and two learners, shared by one module.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support import REPO_ROOT, child_env, free_port, wait_for

PASSWORD = "a-fine-long-password"
LEARNERS = ("ada@example.com", "bob@example.com")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = REPO_ROOT / "docs" / "screenshots"


@contextmanager
def serve_gpulab(data: Path, users: Sequence[tuple[str, str]], *, sync: bool = True, **settings: str) -> Iterator[str]:
    """Prepare ``data`` with the CLI, serve it, yield the base URL, and stop the server afterwards.

    ``settings`` are more ``GPULAB_*`` settings, lower case without the prefix (``exercises_dir=...``)."""
    env = child_env(mode="dev", data_dir=str(data), secret_key="k" * 48, **settings)
    steps: list[tuple[list[str], str | None]] = [(["db", "upgrade"], None)]
    if sync:
        steps.append((["exercises", "sync"], None))
    steps += [(["user", "add", email, "--role", role, "--password-stdin"], PASSWORD + "\n") for email, role in users]
    for args, stdin in steps:
        done = subprocess.run(["gpulab", *args], env=env, input=stdin, capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    port = free_port()
    log = data / "serve.log"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            ["gpulab", "serve", "--port", str(port)], env=env, stdout=sink, stderr=subprocess.STDOUT
        )
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            pytest.fail(log.read_text(errors="replace"))
        try:
            return httpx.get(f"{base}/login", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, timeout_s=60, interval_s=0.3)
        yield base
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def watched_page(browser: Any, *, timezone_id: str = "UTC", ignore_https_errors: bool = False) -> Any:
    """Open a 1280x800 page in its own context (``timezone_id``) that records console errors in ``page.problems``.

    ``ignore_https_errors``: trust a test server's self-signed certificate."""
    context = browser.new_context(viewport={"width": 1280, "height": 800}, timezone_id=timezone_id, locale="en-US",
                                  ignore_https_errors=ignore_https_errors)  # fmt: skip
    page = context.new_page()
    page.problems = []  # console errors (CSP violations included) and uncaught exceptions
    page.on("console", lambda m: page.problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: page.problems.append(str(e)))
    return page


def post_json(page: Any, base: str, path: str, body: dict[str, Any]) -> Any:
    """POST ``body`` as JSON with the page's session (and its Origin, for the API's CSRF rule); return the answer."""
    answer = page.request.post(f"{base}{path}", data=body, headers={"Origin": base})
    assert answer.ok, answer.text()
    return answer.json()


def store_graded(db_file: Path, *, slug: str, email: str, assignment_id: int | None = None, **fields: Any) -> str:
    """Store a graded submission of ``email`` to ``slug`` straight in a served SQLite database; return its id.

    ``fields`` override the submission's columns (``score``, ``verdict``, ``created_at``...)."""
    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    from app.domain.models import Exercise, Submission, SubmissionStatus, User, utcnow
    from worker.core.outcome import Verdict

    engine = create_engine(f"sqlite:///{db_file}")
    try:
        with Session(engine) as db:
            exercise = db.scalars(select(Exercise).where(Exercise.slug == slug)).one()
            learner = db.scalars(select(User).where(User.email == email)).one()
            assert exercise.current_version is not None
            columns: dict[str, Any] = {
                "code": "pass", "status": SubmissionStatus.graded, "verdict": Verdict.passed, "score": 4.0,
                "max_score": 4.0, "created_at": utcnow(), "finished_at": utcnow(), **fields,
            }  # fmt: skip
            submission = Submission(user_id=learner.id, exercise_version_id=exercise.current_version.id,
                                    assignment_id=assignment_id, **columns)  # fmt: skip
            db.add(submission)
            db.commit()
            return str(submission.id)
    finally:
        engine.dispose()


def log_in(page: Any, base: str, email: str, *, landing: str = "/courses") -> None:
    """Log ``email`` in through the log-in form and wait for ``landing``."""
    page.goto(f"{base}/login?next={landing}")
    page.get_by_label("E-mail").fill(email)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(f"{base}{landing}")


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Serve the real bank with two learners; yield the base URL."""
    with serve_gpulab(tmp_path_factory.mktemp("serve"), [(email, "learner") for email in LEARNERS]) as base:
        yield base


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Launch Debian's Chromium headless (fails under CI when it is missing)."""
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI") == "true":
            pytest.fail(f"Chromium is not installed at {CHROMIUM}")
        pytest.skip("Chromium is not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
        )
        try:
            yield chromium
        finally:
            chromium.close()
