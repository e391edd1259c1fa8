"""A timed assessment in a real Chromium, as learners in two time zones, one with a browser clock 10 minutes wrong.

The assignment closes about a minute after the test starts, so each learner's clock ends at the close (a clock never
ends after it); the server's sweeper (every second here) then submits each learner's last draft as their final
attempt. The countdown is checked against the server's remaining seconds, the end time against each viewer's zone.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from tests.e2e.conftest import PASSWORD, log_in, serve_gpulab, watched_page
from tests.support import BANK, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.slow]

SLUG = "python-split-batch"
TEACHER = "teacher@example.com"
LEARNERS = {"berlin@example.com": "Europe/Berlin", "la@example.com": "America/Los_Angeles"}
COURSE = "exam-101"
WINDOW_S = 75  # the assignment's close, from the set-up: long enough to log in and type, short enough to wait for
# The browser's own clock, 10 minutes fast: only Date is shifted (what a wrong system clock changes); the countdown
# runs on performance.now() and the server's seconds, so it must not move.
FAST_CLOCK = """
(() => {
  const RealDate = Date, shift = 10 * 60 * 1000;
  class Shifted extends RealDate {
    constructor(...args) { if (args.length === 0) super(RealDate.now() + shift); else super(...args); }
    static now() { return RealDate.now() + shift; }
  }
  window.Date = Shifted;
})();
"""


@pytest.fixture(scope="module")
def exam(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    data = tmp_path_factory.mktemp("timed")
    bank = data / "bank"
    shutil.copytree(BANK / SLUG, bank / SLUG, ignore=shutil.ignore_patterns("__pycache__"))
    users = [(TEACHER, "instructor"), *[(email, "learner") for email in LEARNERS]]
    with serve_gpulab(data, users, exercises_dir=str(bank), sweep_interval_s="1") as base:
        with httpx.Client(base_url=base, timeout=30) as staff:
            staff.post("/api/auth/login", json={"email": TEACHER, "password": PASSWORD}).raise_for_status()
            staff.post("/api/courses", json={"slug": COURSE, "title": "Exam 101"}).raise_for_status()
            csv = "email\n" + "".join(f"{email}\n" for email in LEARNERS)
            staff.post(f"/api/courses/{COURSE}/members", json={"csv": csv}).raise_for_status()
            closes = datetime.now(UTC) + timedelta(seconds=WINDOW_S)
            made = staff.post(
                f"/api/courses/{COURSE}/assignments",
                json={
                    "title": "Practical", "items": [{"exercise": SLUG, "weight": 1}], "time_limit_min": 90,
                    "opens_at": (datetime.now(UTC) - timedelta(hours=1)).isoformat(), "due_at": closes.isoformat(),
                    "submit_on_expiry": True,
                },
            )  # fmt: skip
            made.raise_for_status()
        yield {"base": base, "id": made.json()["id"], "closes": closes}


def _countdown_s(page: Any) -> int:
    text = page.locator(".countdown-left").first.inner_text()
    minutes, seconds = re.fullmatch(r"(\d+):(\d\d)", text.strip()).groups()  # type: ignore[union-attr]
    return int(minutes) * 60 + int(seconds)


def test_two_zones_a_wrong_clock_and_the_end_that_submits_the_last_draft_once(
    exam: dict[str, Any], browser: Any
) -> None:
    from playwright.sync_api import expect

    base, assignment = exam["base"], exam["id"]
    page_url = f"/courses/{COURSE}/assignments/{assignment}"
    pages = {}
    for email, zone in LEARNERS.items():
        page = watched_page(browser, timezone_id=zone)
        if zone == "America/Los_Angeles":
            page.context.add_init_script(FAST_CLOCK)
        log_in(page, base, email, landing=page_url)
        # Before the start the exercise is not shown: its page sends the learner back to start.
        page.goto(f"{base}{page_url}/exercises/{SLUG}")
        expect(page).to_have_url(f"{base}{page_url}")
        page.get_by_role("button", name="Start").click()
        expect(page.locator(".countdown")).to_be_visible()
        pages[email] = page

    for email, page in pages.items():
        server = page.request.get(f"{base}/api/assignments/{assignment}").json()["my_time"]
        shown = _countdown_s(page)
        assert abs(shown - server["remaining_s"]) <= 3, (email, shown, server["remaining_s"])  # not the browser's clock
        ends = datetime.fromisoformat(server["ends_at"].replace("Z", "+00:00")).astimezone(ZoneInfo(LEARNERS[email]))
        # In the viewer's zone (en-US: "Dec 5, 04:54 PM" in Los Angeles while it is already Dec 6 in UTC).
        assert page.locator(".countdown time").first.inner_text() == f"{ends:%b} {ends.day}, {ends:%I:%M %p}"

    # Each learner works in the exercise; the draft is saved as they type.
    for email, page in pages.items():
        page.goto(f"{base}{page_url}/exercises/{SLUG}")
        expect(page.locator(".countdown")).to_be_visible()  # on every page of the assignment
        page.locator(".cm-editor .cm-content").click()
        page.keyboard.press("Control+End")
        page.keyboard.type(f"\n# final answer of {email}")
        expect(page.locator("#draft-status")).to_contain_text("Draft saved at")

    for page in pages.values():  # the end: the page says it, and closes submitting
        expect(page.locator(".countdown")).to_contain_text("Time is up", timeout=(WINDOW_S + 30) * 1000)
        expect(page.get_by_role("button", name="Submit")).to_be_disabled()
        late = page.request.post(
            f"{base}/api/exercises/{SLUG}/submissions",
            data={"code": "print(1)", "assignment_id": assignment},
            headers={"Origin": base},
        )
        assert late.status == 403, late.text()  # whatever the browser's clock says

    for email, page in pages.items():  # the sweeper submitted each learner's last draft, once

        def attempts(p: Any = page) -> list[dict[str, Any]]:
            return list(p.request.get(f"{base}/api/exercises/{SLUG}/attempts").json())

        wait_for(lambda: attempts(), timeout_s=60)
        made = attempts()
        assert len(made) == 1 and made[0]["assignment_id"] == assignment, made
        history = page.request.get(f"{base}/exercises/{SLUG}/history?attempt={made[0]['id']}").text()
        assert f"# final answer of {email}" in history  # the draft's code, as typed
        wait_for(lambda: len(attempts()) == 1 and attempts()[0]["status"] == "graded", timeout_s=180)
        assert len(attempts()) == 1  # once, whatever the sweeps since
        assert page.problems == [], page.problems
        page.context.close()
