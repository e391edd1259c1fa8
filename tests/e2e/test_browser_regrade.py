"""A regrade request's round trip in a real headless Chromium: a learner asks from their attempt's history, the
instructor finds it in the list, answers with a new score for the item, and the learner sees the answer in the
thread and the new score in their grades. Screenshot: ``docs/screenshots/regrade-request.png``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import SCREENSHOTS, log_in, post_json, serve_gpulab, store_graded, watched_page
from worker.core.outcome import Verdict

pytestmark = [pytest.mark.browser, pytest.mark.slow]
USERS = (("rita@example.com", "instructor"), ("lou@example.com", "learner"))
SLUG = "python-split-batch"
COURSE = "rr-course"


@pytest.fixture(scope="module")
def regrade_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """Serve the real bank on SQLite with an instructor and a learner; yield the base URL and the database file."""
    data = tmp_path_factory.mktemp("regrade")
    with serve_gpulab(data, USERS) as base:
        yield base, data / "gpulab.db"


def test_a_learner_asks_staff_adjust_and_the_learner_sees_it(regrade_server: tuple[str, Path], browser: Any) -> None:
    from playwright.sync_api import expect

    base, db_file = regrade_server
    staff = watched_page(browser)
    log_in(staff, base, "rita@example.com")
    post_json(staff, base, "/api/courses", {"slug": COURSE, "title": "GPU regrades"})
    post_json(staff, base, f"/api/courses/{COURSE}/members", {"csv": "lou@example.com\n"})
    week = {"title": "Week 1", "items": [{"exercise": SLUG}]}
    made = post_json(staff, base, f"/api/courses/{COURSE}/assignments", week)
    sid = store_graded(db_file, slug=SLUG, email="lou@example.com", assignment_id=made["id"], verdict=Verdict.failed,
                       score=2.0, code="def split_batch(x):\n    return x\n")  # fmt: skip

    learner = watched_page(browser)
    log_in(learner, base, "lou@example.com")
    learner.goto(f"{base}/exercises/{SLUG}/history?attempt={sid}#attempt")
    learner.get_by_text("Ask for a regrade of this attempt").click()
    learner.get_by_label("Why should the grade change?").fill("My split handles the uneven batch; test 3 expects 4.")
    learner.get_by_role("button", name="Send the request").click()
    expect(learner.locator("#regrade-status")).to_have_text("open")
    expect(learner.locator("#thread")).to_contain_text("My split handles the uneven batch")
    thread_url = learner.url

    staff.goto(f"{base}/regrade-requests")
    row = staff.locator("#regrade-requests tbody tr").first
    expect(row).to_contain_text("lou@example.com")
    expect(row).to_contain_text("open")
    row.get_by_role("link").click()
    staff.get_by_label("Message to the learner").fill("Right: test 3 was too strict about the last batch.")
    staff.get_by_label("Answer and set the item's score").check()
    staff.get_by_label("New score for the item").fill("75")
    staff.get_by_role("button", name="Send").click()
    expect(staff.get_by_role("status")).to_contain_text("the item's score is set")
    expect(staff.locator("#regrade-status")).to_have_text("answered")

    learner.goto(thread_url)
    expect(learner.locator("#thread")).to_contain_text("test 3 was too strict")
    expect(learner.locator("#thread")).to_contain_text("75 %")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    learner.screenshot(path=str(SCREENSHOTS / "regrade-request.png"), full_page=True)
    mine = learner.request.get(f"{base}/api/courses/{COURSE}/grades/me").json()
    assert mine["assignment_pct"] == {str(made["id"]): 75.0} and mine["cells"][0]["score_pct"] == 75.0, mine
    # Asking twice is not offered: the attempt links to the request instead.
    learner.goto(f"{base}/exercises/{SLUG}/history?attempt={sid}#attempt")
    expect(learner.locator("#regrade")).to_contain_text("Your regrade request on this exercise")
    assert staff.problems == [] and learner.problems == []
