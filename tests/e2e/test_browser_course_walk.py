"""The graded course as its people use it, in a real headless Chromium, by viewers in New York and Kolkata.

- Times: every time on every page of the walk reaches the browser with its offset and is shown on the viewer's own
  clock (a gate's "closed on ..." refusal too); the API answers them with their zone.
- Numbers: scores, percentages and durations are rounded for people ("4.67", "13.1 s"), never "4.66667" or
  "1.314e+04 ms".
- Stale pages: pages are sent ``no-store``; Back and Forward after a submission show the attempt it used and its
  finished grading, not the page as it was before.
- Phone (375x667): the course, assignment and My grades pages are no wider than the screen, "Counted score" can be
  scrolled to inside its focusable table box, and axe finds nothing there.
- Sizes: code over the limit is refused in the learner's words with the real limit, before anything is sent (and
  by the API alike); a 150 KB paste keeps the editor at its bounded height, drawing only what is visible.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from tests.e2e import course_walk as cw
from tests.e2e.conftest import log_in, serve_gpulab, watched_page
from tests.support import bank_file
from worker.core import humane

pytestmark = [pytest.mark.browser, pytest.mark.slow]
GRADING_MS = 180_000  # two cores shared with other test runs: grading may queue behind them
OFFSET = re.compile(r"(Z|[+-]\d\d:\d\d)$")
RAW_UTC = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC")
UNROUNDED = re.compile(r"\d\.\d{3,}|\de[+-]\d")
# Text a person reads: the page without code, editors and inputs (whose digits are the learner's own).
READ_TEXT = """() => {
  const main = document.querySelector("main").cloneNode(true);
  for (const el of main.querySelectorAll("pre, code, textarea, input, script, .cm-editor, .mono")) el.remove();
  return main.textContent;
}"""
TIMES = """() => Array.from(document.querySelectorAll("time[datetime]"),
  (t) => [t.getAttribute("datetime"), t.dataset.format || "", t.textContent, t.title])"""


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory, browser: Any) -> Iterator[cw.Walk]:
    data = tmp_path_factory.mktemp("walk")
    with serve_gpulab(data, cw.USERS) as base:
        yield cw.seed_walk(browser, base, data / "gpulab.db")


@pytest.fixture
def opened(walk: cw.Walk, browser: Any, request: pytest.FixtureRequest) -> Iterator[dict[str | None, Any]]:
    pages = cw.logged_in_pages(browser, walk.base, request.node.callspec.params["zone"])
    yield pages
    for page in pages.values():
        page.context.close()


@pytest.mark.parametrize("zone", cw.ZONES)
def test_every_time_is_shown_on_the_viewers_clock(walk: cw.Walk, opened: dict[str | None, Any], zone: str) -> None:
    from playwright.sync_api import expect

    shown = 0
    for role, path in cw.pages(walk):
        page = opened[role]
        page.goto(f"{walk.base}{path}")
        cw.settle(page)
        for iso, form, text, title in page.evaluate(TIMES):
            where = f"{path} as {role}: {iso} shown as {text!r} ({title!r})"
            assert OFFSET.search(iso), where  # the time came with its zone
            local = cw.local_clock(iso, zone)
            assert local in cw.squeeze(title if form == "ago" else text), where
            shown += 1
        assert not RAW_UTC.search(page.evaluate(READ_TEXT)), f"{path} as {role} shows a raw UTC time"
    assert shown > 30  # the walk has times on most pages

    # The attempt graded at 23:16 UTC: the evening before in New York, the morning after in Kolkata.
    page = opened[cw.LEARNER]
    page.goto(f"{walk.base}/exercises/{cw.CODE}/history?attempt={walk.attempt_id}")
    day = cw.GRADED_AT.astimezone(ZoneInfo(zone))
    expect(page.locator("#attempt-title time")).to_contain_text(f"{day:%b} {day.day}")

    # A refusal under a closed assignment says when it closed on this clock, as the gate above it does.
    page.goto(f"{walk.base}/courses/{cw.COURSE}/assignments/{walk.closed_id}/exercises/{cw.CODE}")
    page.get_by_role("button", name="Submit").click()
    error = page.locator("#submit-error")
    expect(error).to_contain_text("closed on")
    gate_time = page.locator("#gate-text time").first.get_attribute("datetime") or ""
    assert cw.local_clock(gate_time, zone) in cw.squeeze(error.inner_text())
    assert "UTC" not in error.inner_text()

    # The API answers every time with its zone: the LTI keys' dates as the admin reads them.
    keys = opened[cw.ADMIN].request.get(f"{walk.base}/api/admin/lti/keys").json()
    assert keys and all(OFFSET.search(key["created_at"]) for key in keys), keys


@pytest.mark.parametrize("zone", cw.ZONES)
def test_numbers_are_rounded_for_people(walk: cw.Walk, opened: dict[str | None, Any], zone: str) -> None:
    from playwright.sync_api import expect

    for role, path in cw.pages(walk):
        if path == "/docs":
            continue  # Swagger UI shows the schema's own numbers
        page = opened[role]
        page.goto(f"{walk.base}{path}")
        cw.settle(page)
        text = cw.squeeze(page.evaluate(READ_TEXT))
        assert not UNROUNDED.search(text), f"{path} as {role}: {UNROUNDED.search(text)} in {text[:400]}"

    learner = opened[cw.LEARNER]
    learner.goto(f"{walk.base}/exercises/{cw.CODE}/history?attempt={walk.attempt_id}")
    expect(learner.locator("main")).to_contain_text("4.67")  # 14/3 points
    staff = opened[cw.INSTRUCTOR]
    staff.goto(f"{walk.base}/instructor/submissions/{walk.attempt_id}")
    expect(staff.locator("main")).to_contain_text("4.67/10 points")
    expect(staff.locator("main")).to_contain_text("graded in 13.1 s")
    admin = opened[cw.ADMIN]
    admin.goto(f"{walk.base}/admin")
    timing = cw.squeeze(admin.locator("#t-h + dl").inner_text())
    assert re.search(r"run p50 / p95 [\d.]+ m?s / [\d.]+ m?s", timing), timing  # "850 ms / 13.1 s"
    assert not re.search(r"\b\d{4,} ms", timing), timing  # durations in the unit people read


@pytest.mark.parametrize("zone", cw.ZONES)
def test_a_phone_shows_the_course_pages_within_the_screen(walk: cw.Walk, browser: Any, zone: str) -> None:
    axe = cw.axe_source() if cw.AXE.is_file() or os.environ.get("CI") == "true" else None  # the layout needs no axe
    context = browser.new_context(viewport={"width": 375, "height": 667}, timezone_id=zone, locale="en-US",
                                  is_mobile=True, has_touch=True)  # fmt: skip
    page = context.new_page()
    try:
        log_in(page, walk.base, cw.LEARNER)
        course = f"{walk.base}/courses/{cw.COURSE}"
        under = f"{course}/assignments/{walk.assignment_id}"
        for url in (course, under, f"{course}/grades", f"{under}/exercises/{cw.CODE}"):
            page.goto(url)
            cw.settle(page)
            assert page.evaluate("() => document.documentElement.scrollWidth") <= 375, url
            assert axe is None or cw.axe_findings(page, axe) == [], url
        # "Counted score" is in the table's own scrolling box, which the keyboard can reach while it overflows.
        page.goto(under)
        cw.settle(page)
        header = page.get_by_role("columnheader", name="Counted score").first
        box = page.locator(".scroll", has=header).first
        if box.evaluate("(b) => b.scrollWidth > b.clientWidth"):
            assert box.get_attribute("tabindex") == "0"
            box.focus()
            page.keyboard.press("End")  # scrolls the focused box to its far end
        header.scroll_into_view_if_needed()
        where = header.bounding_box()
        assert where is not None and where["x"] >= 0 and where["x"] + where["width"] <= 375, where
    finally:
        context.close()


@pytest.mark.parametrize("zone", cw.ZONES)
def test_back_and_forward_after_submitting_show_the_new_attempt(walk: cw.Walk, browser: Any, zone: str) -> None:
    from playwright.sync_api import expect

    learner = cw.LEARNER if zone == cw.ZONES[0] else cw.OTHER  # one fresh attempt each: both have 1 of 3 used
    page = watched_page(browser, timezone_id=zone)
    try:
        log_in(page, walk.base, learner)
        course = f"{walk.base}/courses/{cw.COURSE}/assignments/{walk.assignment_id}"
        answer = page.goto(course)
        assert answer is not None and answer.headers.get("cache-control") == "no-store"
        expect(page.locator("table.items tbody tr").first).to_contain_text("2 attempts left")
        page.get_by_role("link", name="Split a batch like DataParallel's scatter").first.click()
        expect(page.locator("#gate-text")).to_contain_text("2 attempts left")
        expect(page.locator(".cm-editor .cm-content")).to_be_visible()  # exercise.js mounted the editor
        page.evaluate("(code) => window.gpulabExercise.editor().setValue(code)", bank_file(cw.CODE, "solution.py"))
        asked: list[str] = []
        page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))  # "Submit? 2 of 3 ..."
        page.get_by_role("button", name="Submit").click()
        expect(page.locator("#gate-text")).to_contain_text("1 attempt left")
        assert asked and "2 of 3 attempts left" in asked[0], asked

        page.go_back()  # to the assignment, while the attempt may still be grading
        expect(page).to_have_url(course)
        expect(page.locator("table.items tbody tr").first).to_contain_text("1 attempt left")
        page.go_forward()  # to the exercise: the new attempt and its grading, not the page before it
        expect(page.locator("#gate-text")).to_contain_text("1 attempt left")
        expect(page.locator("#result-verdict")).to_be_visible(timeout=GRADING_MS)  # it picked up the grading
        item = next(i for i in page.request.get(f"{walk.base}/api/assignments/{walk.assignment_id}").json()["items"]
                    if i["exercise"] == cw.CODE)  # fmt: skip
        counted = f"Counted score: {humane.number(item['score_pct'])}%"
        expect(page.locator("#gate-score")).to_have_text(counted)  # the score that counts now, the new one if better
        page.go_back()
        expect(page.locator("table.items tbody tr").first).to_contain_text(counted.removeprefix("Counted score: "))
        assert page.problems == []
    finally:
        page.context.close()


@pytest.mark.parametrize("zone", cw.ZONES)
def test_code_over_the_limit_is_refused_in_the_learners_words(walk: cw.Walk, browser: Any, zone: str) -> None:
    from playwright.sync_api import expect

    page = watched_page(browser, timezone_id=zone)
    try:
        log_in(page, walk.base, cw.OTHER)
        # Under the assignment: its practice setting (examples only) would refuse a practice submission first.
        page.goto(f"{walk.base}/courses/{cw.COURSE}/assignments/{walk.assignment_id}/exercises/{cw.CODE}")
        before = page.request.get(f"{walk.base}/api/exercises/{cw.CODE}/progress").json()["attempts"]
        line = "value = 1  # a line of output pasted into the editor, long enough to make the code large\n"
        pasted = line * (150 * 1024 // len(line))  # about 150 KB
        page.locator(".cm-content").click()
        page.keyboard.press("ControlOrMeta+a")
        page.keyboard.insert_text(pasted)  # one long input, as a paste from some input methods arrives
        assert page.evaluate("() => window.gpulabExercise.editor().getValue()") == pasted
        # The editor keeps its bounded height and draws only the lines in view, not all of them.
        editor = page.locator(".cm-editor").bounding_box()
        assert editor is not None and editor["height"] <= 0.75 * 800, editor
        assert page.locator(".cm-line").count() < pasted.count("\n") / 10
        page.get_by_role("button", name="Submit").click()
        expect(page.locator("#submit-error")).to_have_text(
            "Your code is 150 KB; the limit is 64 KB. Shorten it (remove long comments, pasted output or data) "
            "and submit again."
        )  # fmt: skip
        assert page.request.get(f"{walk.base}/api/exercises/{cw.CODE}/progress").json()["attempts"] == before
        # The API says the same to a client that sends it anyway.
        refused = page.request.post(
            f"{walk.base}/api/exercises/{cw.CODE}/submissions",
            data={"code": pasted, "assignment_id": walk.assignment_id},
            headers={"Origin": walk.base},
        )
        assert refused.status == 413
        assert refused.json()["detail"].startswith("Your code is 150 KB; the limit is 64 KB.")
        assert page.problems == []
    finally:
        page.context.close()
