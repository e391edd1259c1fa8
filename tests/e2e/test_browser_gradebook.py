"""The gradebook in a real headless Chromium: an instructor opens the gradebook of a course with one learner's late,
graded submission, overrides the cell with a comment, sees the "O" mark and the new score, reverts it; the learner
saw the override on their grades page in between. Screenshot: ``docs/screenshots/gradebook.png``.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from app.domain.models import utcnow
from tests.e2e.conftest import SCREENSHOTS, log_in, post_json, serve_gpulab, store_graded, watched_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]
USERS = (("gina@example.com", "instructor"), ("leo@example.com", "learner"))
SLUG = "python-split-batch"
COURSE = "gb-course"


@pytest.fixture(scope="module")
def gradebook_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """Serve the real bank on SQLite with an instructor and a learner; yield the base URL and the database file."""
    data = tmp_path_factory.mktemp("gradebook")
    with serve_gpulab(data, USERS) as base:
        yield base, data / "gpulab.db"


def _late_submission(db_file: Path, assignment_id: int) -> None:
    """Store leo's fully passing submission, made after the due date (in the late period)."""
    late = utcnow() - timedelta(days=1)
    store_graded(db_file, slug=SLUG, email="leo@example.com", assignment_id=assignment_id, created_at=late,
                 finished_at=late)  # fmt: skip


def test_override_and_revert_a_cell_and_the_learner_sees_it(
    gradebook_server: tuple[str, Path], browser: Any
) -> None:  # fmt: skip
    from playwright.sync_api import expect

    base, db_file = gradebook_server
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    staff = watched_page(browser)
    log_in(staff, base, "gina@example.com")
    post_json(staff, base, "/api/courses", {"slug": COURSE, "title": "GPU grading"})
    post_json(staff, base, f"/api/courses/{COURSE}/members", {"csv": "leo@example.com\n"})
    now = utcnow()
    made = post_json(staff, base, f"/api/courses/{COURSE}/assignments", {
        "title": "Week 1", "items": [{"exercise": SLUG, "weight": 1}], "due_at": (now - timedelta(days=2)).isoformat(),
        "late_until": (now + timedelta(days=2)).isoformat(), "late_credit_pct": 50,
    })  # fmt: skip
    _late_submission(db_file, made["id"])

    staff.goto(f"{base}/courses/{COURSE}")
    staff.get_by_role("link", name="Gradebook").click()
    staff.wait_for_url(f"{base}/courses/{COURSE}/gradebook")
    cell = staff.locator("td.grade-cell").first
    expect(cell.locator(".score")).to_have_text("50")
    expect(cell.locator("abbr.mark-late")).to_have_text("L")
    expect(staff.get_by_role("link", name="Download CSV")).to_have_attribute(
        "href", f"/api/courses/{COURSE}/gradebook.csv"
    )

    # Override: the form refuses an empty comment in the browser (required), then takes one.
    cell.locator("summary").click()
    cell.get_by_label("Score (0 to 100)").fill("92")
    cell.get_by_label("Why").fill("Oral exam showed full understanding")
    cell.get_by_role("button", name="Set score").click()
    expect(staff.locator(".flash-ok")).to_contain_text("set to 92%")
    cell = staff.locator("td.grade-cell").first
    expect(cell.locator(".score")).to_have_text("92")
    mark = cell.locator("abbr.mark-override")
    expect(mark).to_have_text("O")
    expect(mark).to_have_attribute("title", "Overridden by gina@example.com: Oral exam showed full understanding "
                                            "(computed 50)")  # fmt: skip
    expect(staff.locator("#override-rows tr.in-force")).to_contain_text("Oral exam showed full understanding")
    staff.screenshot(path=str(SCREENSHOTS / "gradebook.png"), full_page=True)

    # The learner sees the override and its comment on their grades page.
    learner = watched_page(browser)
    log_in(learner, base, "leo@example.com")
    learner.goto(f"{base}/courses/{COURSE}")
    learner.get_by_role("link", name="My grades").click()
    row = learner.locator("#my-grades tr.grade-line").first
    expect(row.locator(".score")).to_have_text("92%")
    expect(row).to_contain_text("set by staff")
    expect(row).to_contain_text("Oral exam showed full understanding")
    assert learner.request.get(f"{base}/courses/{COURSE}/gradebook").status == 403

    # Revert: the computed score is back, the audit list keeps the override as reverted.
    staff.get_by_role("button", name="Revert the override of leo@example.com").click()
    expect(staff.locator(".flash-ok")).to_contain_text("reverted")
    cell = staff.locator("td.grade-cell").first
    expect(cell.locator(".score")).to_have_text("50")
    expect(cell.locator("abbr.mark-override")).to_have_count(0)
    expect(staff.locator("#override-rows tr.reverted")).to_contain_text("by gina@example.com")
    learner.goto(f"{base}/courses/{COURSE}/grades")
    expect(learner.locator("#my-grades tr.grade-line").first.locator(".score")).to_have_text("50%")
    assert staff.problems == [] and learner.problems == []
