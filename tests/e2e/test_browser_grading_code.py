"""Staff grading of code in a real headless Chromium: a learner's submission to an exercise with a ``[[rubric]]`` is
graded by its tests in the sandbox, an instructor ticks an item, comments on a line by clicking its number, releases,
and the learner's history shows the rubric's points on top of the tests, with the line comment.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import log_in, serve_gpulab, watched_page
from tests.support import REPO_ROOT
from worker.bank.spec import load_exercise

pytestmark = [pytest.mark.browser, pytest.mark.slow]
USERS = (("hal@example.com", "instructor"), ("jo@example.com", "learner"))
SLUG = "python-split-batch"
RUBRIC = """
rubric_comments = ["Say which rule decides the shard size."]

[[rubric]]
id = "explains-rule"
points = 1
text = "A comment says how the shard size is chosen."

[[rubric]]
id = "magic-numbers"
points = -1
text = "Hard-codes a device count."
"""


@pytest.fixture(scope="module")
def code_grading_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Serve a bank of one exercise, ``python-split-batch`` with a rubric added (top-level keys before tables)."""
    bank = tmp_path_factory.mktemp("bank")
    shutil.copytree(REPO_ROOT / "exercises" / SLUG, bank / SLUG)
    toml = bank / SLUG / "exercise.toml"
    head, tables = toml.read_text().split("\n[limits]\n", 1)
    comments, items = RUBRIC.split("\n\n", 1)
    toml.write_text(head + comments + "\n\n[limits]\n" + tables + "\n" + items)
    with serve_gpulab(tmp_path_factory.mktemp("code-grading"), USERS, exercises_dir=str(bank)) as base:
        yield base


def _submit_and_wait(page: Any, base: str) -> str:
    code = (REPO_ROOT / "exercises" / SLUG / "solution.py").read_text()
    sent = page.request.post(f"{base}/api/exercises/{SLUG}/submissions", data={"code": code},
                             headers={"Origin": base})  # fmt: skip
    assert sent.status == 202, sent.text()
    sid = sent.json()["id"]
    deadline = time.monotonic() + 120
    while page.request.get(f"{base}/api/submissions/{sid}").json()["status"] in ("queued", "running"):
        assert time.monotonic() < deadline, "the submission was not graded in time"
        time.sleep(0.3)
    return str(sid)


def test_an_instructor_grades_code_with_a_line_comment(code_grading_server: str, browser: Any) -> None:
    from playwright.sync_api import expect

    base = code_grading_server
    learner = watched_page(browser)
    log_in(learner, base, "jo@example.com", landing=f"/exercises/{SLUG}")
    sid = _submit_and_wait(learner, base)

    staff = watched_page(browser)
    log_in(staff, base, "hal@example.com", landing="/instructor")
    staff.goto(f"{base}/instructor/exercises/{SLUG}/grading")
    expect(staff.locator("#grading-counts")).to_contain_text("1 to grade")
    staff.get_by_role("link", name="Grade the next answer").click()
    expect(staff.locator("#learner-code")).to_contain_text("def split_batch")
    staff.get_by_role("button", name="Comment on line 8").click()
    staff.locator("#line-comments input[name=line_text]").first.fill("Good: ceiling division without floats.")
    staff.get_by_label("A comment says how the shard size is chosen.").check()
    expect(staff.locator("#rubric-total")).to_have_text("1")
    staff.get_by_role("button", name="Save and grade the next").click()
    expect(staff.locator(".flash").last).to_contain_text("Nothing left to grade here.")
    staff.get_by_role("button", name="Release 1 graded answer").click()
    expect(staff.locator(".flash").last).to_contain_text("Released 1 grade")

    learner.goto(f"{base}/exercises/{SLUG}/history?attempt={sid}#attempt")
    tests_points = load_exercise(REPO_ROOT / "exercises" / SLUG).max_score
    full = f"{tests_points + 1:g}"  # the tests' points, and 1 from the rubric
    expect(learner.locator(".score")).to_contain_text(f"Score {full} / {full}")
    expect(learner.locator(".tests")).to_contain_text("Line 8: Good: ceiling division without floats.")
    expect(learner.locator(".tests")).to_contain_text("✓ +1 A comment says how the shard size is chosen.")
    assert staff.problems == [] and learner.problems == []
