"""Courses in a real headless Chromium: an instructor in Berlin creates a course and an assignment due next week,
enrolls a learner from CSV and grants an extension; the learner, in New York, sees the extended due date on their own
clock, the attempts left before submitting, a graded submission under the assignment, and the refusal once the attempt
limit is reached. Screenshots: ``docs/screenshots/course.png`` and ``docs/screenshots/assignment-extensions.png``.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.e2e.conftest import SCREENSHOTS, log_in, serve_gpulab, watched_page
from tests.support import bank_file

pytestmark = [pytest.mark.browser, pytest.mark.slow]
USERS = (("ina@example.com", "instructor"), ("lea@example.com", "learner"))
SLUG = "python-split-batch"
GRADING_MS = 180_000  # two cores shared with other test runs: grading may queue behind them
BERLIN, NEW_YORK = ZoneInfo("Europe/Berlin"), ZoneInfo("America/New_York")


@pytest.fixture(scope="module")
def course_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """Serve the real bank on SQLite with an instructor and a learner; yield the base URL and the database file."""
    data = tmp_path_factory.mktemp("courses")
    with serve_gpulab(data, USERS) as base:
        yield base, data / "gpulab.db"


def _local(day: datetime) -> str:
    return day.strftime("%Y-%m-%dT%H:%M")


def _shown(when: datetime) -> str:
    """What Chromium's en-US long format (app.js, data-format="long") shows for ``when`` on its own clock."""
    return f"{when:%a}, {when:%b} {when.day}, {when.year}, {when:%I:%M %p} {when.tzname()}"


def _squeeze(text: str) -> str:
    return re.sub(r"\s+", " ", text.replace("\u202f", " ")).strip()


def test_course_assignment_extension_and_gated_submission(
    course_server: tuple[str, Path], browser: Any
) -> None:  # fmt: skip
    from playwright.sync_api import expect

    base, db_file = course_server
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    next_week = (datetime.now(BERLIN) + timedelta(days=7)).replace(hour=17, minute=0, second=0, microsecond=0)
    extended = next_week + timedelta(days=2)

    # The instructor (in Berlin) creates the course and enrolls the learner from CSV.
    staff = watched_page(browser, timezone_id="Europe/Berlin")
    log_in(staff, base, "ina@example.com")
    staff.get_by_label("Title").fill("GPU 101")
    staff.get_by_label("Short name").fill("gpu-101")
    staff.get_by_role("button", name="Create course").click()
    expect(staff).to_have_url(f"{base}/courses/gpu-101/manage")
    staff.get_by_label("CSV rows").fill("email,name\nlea@example.com,Lea\n")
    staff.get_by_role("button", name="Enroll").click()
    expect(staff.locator("#report-rows tbody tr")).to_have_count(1)
    expect(staff.locator("#report-rows tbody tr").first).to_contain_text("added")
    expect(staff.locator("#member-rows")).to_contain_text("lea@example.com")

    # An assignment due next week at 17:00 Berlin time: the zone select starts at the browser's zone.
    staff.get_by_role("link", name="New assignment").click()
    expect(staff.get_by_label("Time zone of these dates")).to_have_value("Europe/Berlin")
    staff.get_by_label("Title").fill("Week 1: split a batch")
    staff.get_by_label("Due").fill(_local(next_week))
    staff.get_by_label("Attempts per exercise").fill("1")
    staff.get_by_label("Exercises").fill(f"{SLUG} 1\n")
    staff.get_by_role("button", name="Create assignment").click()
    expect(staff.locator(".flash-ok")).to_contain_text("created")
    with sqlite3.connect(db_file) as db:
        (stored,) = db.execute("SELECT due_at FROM assignments").fetchone()
    assert datetime.fromisoformat(stored).replace(tzinfo=UTC) == next_week.astimezone(UTC)

    # An extension of two days, with its reason, in the audit list.
    staff.get_by_role("link", name="Extensions of Week 1: split a batch").click()
    staff.get_by_label("Learner").select_option("lea@example.com")
    expect(staff.get_by_label("Time zone of these dates")).to_have_value("Europe/Berlin")
    expect(staff.get_by_label("New due date")).to_have_value(_local(next_week))  # its own due date, on this clock
    staff.get_by_label("New due date").fill(_local(extended))
    staff.get_by_label("Reason").fill("Conference travel")
    staff.get_by_role("button", name="Grant extension").click()
    expect(staff.locator(".flash-ok")).to_contain_text("Extension granted to lea@example.com")
    expect(staff.locator("#extension-rows tbody tr")).to_have_count(1)
    expect(staff.locator("#extension-rows tbody tr").first).to_contain_text("Conference travel")
    expect(staff.locator("#extension-rows tbody tr").first).to_contain_text("by ina@example.com")
    staff.screenshot(path=str(SCREENSHOTS / "assignment-extensions.png"), full_page=True)
    assert staff.problems == []

    # The learner (in New York) sees their extended due date on their own clock and the attempts left.
    learner = watched_page(browser, timezone_id="America/New_York")
    log_in(learner, base, "lea@example.com")
    learner.get_by_role("link", name="GPU 101").click()
    expect(learner).to_have_url(f"{base}/courses/gpu-101")
    expect(learner.locator(".dates-title")).to_have_text("Your dates (extended)")
    due = learner.locator(".dates .due time")
    expect(due).not_to_have_text(re.compile("UTC"))  # app.js has localised it
    assert _squeeze(due.inner_text()) == _shown(extended.astimezone(NEW_YORK))
    expect(learner.locator(".gate-sentence")).to_contain_text("1 attempt left")
    learner.screenshot(path=str(SCREENSHOTS / "course.png"), full_page=True)

    # Under the assignment: the gate above Submit, a graded submission, then the refusal.
    learner.locator("table.items tbody a").first.click()
    expect(learner.locator("#gate-text")).to_contain_text("1 attempt left")
    expect(learner.locator(".cm-editor .cm-content")).to_be_visible()
    learner.evaluate("(code) => window.gpulabExercise.editor().setValue(code)", bank_file(SLUG, "solution.py"))
    asked: list[str] = []
    learner.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    learner.get_by_role("button", name="Submit").click()
    expect(learner.locator("#result-verdict")).to_have_text("passed", timeout=GRADING_MS)
    expect(learner.locator("#gate-text")).to_contain_text("no attempts left (1 used)")
    assert asked == ["Submit? You have 1 of 1 attempt left; this one counts."]  # a counted attempt is confirmed
    expect(learner.locator("#gate-score")).to_have_text("Counted score: 100%")
    learner.get_by_role("button", name="Submit").click()
    expect(learner.locator("#submit-error")).to_contain_text("no attempts left")
    refusal = "the server responded with a status of 403"  # the refused POST, which the browser logs itself
    assert [p for p in learner.problems if refusal not in p] == []
