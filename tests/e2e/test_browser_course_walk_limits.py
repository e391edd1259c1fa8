"""Issue 21 in a real headless Chromium, as learners in New York and in Kolkata see it: attempts spent only on
answers (refusals, the confirmation), practice that cannot bypass an assignment, extensions, accounts with a
one-time password, quiz history in prose, the rate limit's countdown, and the course context kept on the way.

One server and one course for the module; each test runs once per viewer's zone, with that zone's own learner.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import PASSWORD, log_in, post_json, serve_gpulab, store_graded, watched_page

pytestmark = [pytest.mark.browser, pytest.mark.slow]
COURSE = "walk-101"
CODE_SLUG = "python-split-batch"  # "Week 1": 3 attempts, a late period
RATED_SLUG = "tf-global-batch"  # "Speed week": one submission, then one every 10 min
QUIZ_SLUG = "quiz-torch-dataparallel-why"  # "Quiz week": 2 attempts; 7 questions, the last one staff-graded
LEARNER_OF = {"America/New_York": "ny@example.com", "Asia/Kolkata": "kol@example.com"}
ZONES = pytest.mark.parametrize("zone", sorted(LEARNER_OF))
USERS = (("ivo@example.com", "instructor"), ("tam@example.com", "learner"),
         *((email, "learner") for email in LEARNER_OF.values()))  # fmt: skip


@dataclass(frozen=True)
class Walk:
    base: str
    db_file: Path
    week: int  # assignment ids
    speed: int
    quiz: int


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory, browser: Any) -> Iterator[Walk]:
    """Serve the bank with the course set up by its instructor (in Berlin) through the API."""
    data = tmp_path_factory.mktemp("walk")
    with serve_gpulab(data, USERS) as base:
        staff = watched_page(browser, timezone_id="Europe/Berlin")
        log_in(staff, base, "ivo@example.com")
        post_json(staff, base, "/api/courses", {"slug": COURSE, "title": "Walk 101"})
        rows = "email,name,role\n" + "".join(f"{e},{e[:3]},learner\n" for e in LEARNER_OF.values())
        post_json(staff, base, f"/api/courses/{COURSE}/members", {"csv": rows + "tam@example.com,Tam,ta\n"})
        now = datetime.now(UTC).replace(microsecond=0)

        def assignment(title: str, slug: str, **fields: Any) -> int:
            body = {"title": title, "items": [{"exercise": slug}], **fields}
            return int(post_json(staff, base, f"/api/courses/{COURSE}/assignments", body)["id"])

        week = assignment("Week 1", CODE_SLUG, max_attempts=3, due_at=(now + timedelta(days=7)).isoformat(),
                          late_until=(now + timedelta(days=9)).isoformat())  # fmt: skip
        speed = assignment("Speed week", RATED_SLUG, rate_burst=1, rate_refill_s=600)
        quiz = assignment("Quiz week", QUIZ_SLUG, max_attempts=2, due_at=(now + timedelta(days=7)).isoformat())
        staff.context.close()
        yield Walk(base, data / "gpulab.db", week, speed, quiz)


def _learner(browser: Any, walk: Walk, zone: str, landing: str = "/courses") -> Any:
    page = watched_page(browser, timezone_id=zone)
    log_in(page, walk.base, LEARNER_OF[zone], landing=landing)
    return page


def _under(walk: Walk, assignment_id: int, slug: str) -> str:
    return f"{walk.base}/courses/{COURSE}/assignments/{assignment_id}/exercises/{slug}"


@ZONES
def test_no_attempt_is_spent_on_nothing_and_a_counted_one_is_confirmed(walk: Walk, browser: Any, zone: str) -> None:
    from playwright.sync_api import expect

    page = _learner(browser, walk, zone)
    page.goto(_under(walk, walk.week, CODE_SLUG))
    expect(page.locator(".cm-editor .cm-content")).to_be_visible()
    expect(page.locator("#gate-text")).to_contain_text("3 attempts left")

    asked: list[str] = []
    sent: list[str] = []
    page.on("request", lambda request: sent.append(request.url) if request.method == "POST" else None)
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.dismiss()))
    page.evaluate("() => window.gpulabExercise.editor().setValue('print(1)\\n')")
    page.get_by_role("button", name="Submit").click()  # dismissed: nothing is sent
    expect(page.locator("#submit-button")).to_be_enabled()
    assert asked == ["Submit? You have 3 of 3 attempts left; this one counts."] and sent == []

    page.once("dialog", lambda dialog: dialog.accept())
    page.evaluate("() => window.gpulabExercise.editor().setValue('   \\n')")
    page.get_by_role("button", name="Submit").click()
    expect(page.locator("#submit-error")).to_contain_text("the code is empty")
    expect(page.locator("#submit-error")).to_contain_text("no attempt was used")
    expect(page.locator("#gate-text")).to_contain_text("3 attempts left")  # the refusal cost nothing

    page.goto(_under(walk, walk.quiz, QUIZ_SLUG))
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("fieldset[data-question] input").first.check()
    page.get_by_role("button", name="Check my answers").click()
    expect(page.locator("#quiz-error")).to_contain_text("6 of 7 questions are unanswered")
    expect(page.locator("#gate-text")).to_contain_text("2 attempts left")
    assert [p for p in page.problems if "status of 422" not in p] == []


@ZONES
def test_practice_cannot_bypass_the_assignment_and_history_says_where(walk: Walk, browser: Any, zone: str) -> None:
    from playwright.sync_api import expect

    email = LEARNER_OF[zone]
    store_graded(walk.db_file, slug=RATED_SLUG, email=email, created_at=datetime.now(UTC) - timedelta(days=30))
    store_graded(walk.db_file, slug=RATED_SLUG, email=email, assignment_id=walk.speed,
                 created_at=datetime.now(UTC) - timedelta(days=1))  # fmt: skip
    page = _learner(browser, walk, zone, landing=f"/exercises/{CODE_SLUG}")
    note = page.locator("#practice-bound")
    expect(note).to_contain_text("part of the assignment Week 1 (Walk 101)")
    expect(note).to_contain_text("run the example tests only")
    expect(page.get_by_role("button", name="Submit")).to_be_disabled()
    expect(page.get_by_role("button", name="Run example tests")).to_be_enabled()
    note.get_by_role("link", name="Submit it under the assignment").click()
    expect(page).to_have_url(_under(walk, walk.week, CODE_SLUG))

    page.goto(f"{walk.base}/exercises/{RATED_SLUG}/history")
    made_in = page.locator(".attempt-table td.made-in")
    expect(made_in).to_have_count(2)
    expect(made_in.nth(0)).to_contain_text("Speed week (Walk 101)")  # newest first
    expect(made_in.nth(1)).to_have_text("Practice")
    assert page.problems == []


@ZONES
def test_an_extension_of_the_due_date_alone_is_granted_and_the_extra_attempt_shows(
    walk: Walk, browser: Any, zone: str
) -> None:  # fmt: skip
    from playwright.sync_api import expect

    staff = watched_page(browser, timezone_id="Europe/Berlin")
    log_in(staff, walk.base, "ivo@example.com")
    staff.goto(f"{walk.base}/courses/{COURSE}/assignments/{walk.week}/extensions")
    staff.get_by_label("Learner").select_option(LEARNER_OF[zone])
    expect(staff.get_by_label("Time zone of these dates")).to_have_value("Europe/Berlin")
    expect(staff.get_by_label(re.compile("^Late submissions until"))).to_have_value("")  # not the old late end
    due = staff.get_by_label("New due date")
    later = (datetime.fromisoformat(due.input_value()) + timedelta(days=5)).strftime("%Y-%m-%dT%H:%M")
    due.fill(later)  # past the assignment's own late end: refused before
    staff.get_by_label("Extra attempts").fill("1")
    staff.get_by_label("Reason").fill("Family matters")
    staff.get_by_role("button", name="Grant extension").click()
    expect(staff.locator(".flash-ok")).to_contain_text(f"Extension granted to {LEARNER_OF[zone]}")
    staff.context.close()

    page = _learner(browser, walk, zone)
    page.goto(f"{walk.base}/courses/{COURSE}")
    week = page.locator(f"#assignment-{walk.week}")
    expect(week.locator(".dates-title")).to_have_text("Your dates (extended)")
    expect(week.locator(".dates")).to_contain_text("4 per exercise (3, +1 for you)")
    expect(week.locator(".dates")).to_contain_text("Late until")  # a late period as long as the assignment's
    assert page.problems == []


@ZONES
def test_a_one_time_password_is_changed_at_first_log_in(walk: Walk, browser: Any, zone: str) -> None:
    from playwright.sync_api import expect

    newcomer = f"new-{zone.split('/')[1].lower()}@example.com"
    staff = watched_page(browser, timezone_id="Europe/Berlin")
    log_in(staff, walk.base, "ivo@example.com")
    staff.goto(f"{walk.base}/courses/{COURSE}/manage")
    staff.get_by_label("CSV rows").fill(f"email\n{newcomer}\n")
    staff.get_by_role("button", name="Enroll").click()
    row = staff.locator("#report-rows tbody tr").first
    expect(row).to_contain_text("created")
    one_time = row.locator("code").inner_text()
    staff.goto(f"{walk.base}/courses/{COURSE}/members")  # a reload of the form's address: the manage page, no 405
    expect(staff).to_have_url(f"{walk.base}/courses/{COURSE}/manage#members")
    staff.context.close()

    page = watched_page(browser, timezone_id=zone)
    page.goto(f"{walk.base}/login?next=/courses/{COURSE}")
    page.get_by_label("E-mail").fill(newcomer)
    page.get_by_label("Password").fill(one_time)
    page.get_by_role("button", name="Log in").click()
    expect(page).to_have_url(f"{walk.base}/account/password?next=/courses/{COURSE}")
    expect(page.locator("#password-forced")).to_contain_text("one-time password")
    page.get_by_label("Current password").fill(one_time)
    page.locator("#new").fill(PASSWORD)
    page.get_by_label("New password again").fill(PASSWORD + "!")
    page.get_by_role("button", name="Change password").click()
    expect(page.locator("#password-error")).to_contain_text("the two new passwords differ")
    page.get_by_label("Current password").fill(one_time)
    page.locator("#new").fill(PASSWORD)
    page.get_by_label("New password again").fill(PASSWORD)
    page.get_by_role("button", name="Change password").click()
    expect(page).to_have_url(f"{walk.base}/courses/{COURSE}")
    expect(page.locator(".flash-ok")).to_contain_text("Your password is changed")
    assert [p for p in page.problems if "status of 422" not in p] == []  # the refused form's own answer


@ZONES
def test_quiz_history_shows_questions_and_answers_in_prose(walk: Walk, browser: Any, zone: str) -> None:
    from playwright.sync_api import expect

    written = "Each GPU gets a slice of the batch and a copy of the model; the outputs are gathered on the first."
    answers = {"twice-as-fast": ["b"], "bigger-models": ["b"], "explain-forward": written}
    store_graded(walk.db_file, slug=QUIZ_SLUG, email=LEARNER_OF[zone], assignment_id=walk.quiz,
                 code=json.dumps(answers), score=2.0, max_score=14.0)  # fmt: skip
    page = _learner(browser, walk, zone, landing=f"/exercises/{QUIZ_SLUG}")
    expect(page.locator(".prompt .markdown")).to_contain_text("graded by staff")
    expect(page.locator(".prompt .markdown")).not_to_contain_text("self-assessed")

    page.goto(f"{walk.base}/exercises/{QUIZ_SLUG}/history?assignment={walk.quiz}")
    items = page.locator("ol.quiz-answers > li")
    expect(items).to_have_count(7)
    expect(items.first).to_contain_text("Add a second GPU and your model learns twice as fast.")
    expect(items.first.locator(".your-answer")).to_contain_text("Two GPUs can cut the time per epoch")
    expect(items.nth(2).locator(".your-answer")).to_contain_text("not answered")
    text = items.last.locator("blockquote.answer-text")
    expect(text).to_have_text(written)
    font = text.evaluate("(node) => getComputedStyle(node).fontFamily")
    assert "mono" not in font.lower(), font  # prose, not code
    expect(page.locator("text=Code of attempt")).to_have_count(0)
    expect(page.get_by_role("navigation", name="Breadcrumb")).to_contain_text("Walk 101")
    assert page.problems == []


@ZONES
def test_the_rate_limit_disables_submit_under_a_live_countdown(walk: Walk, browser: Any, zone: str) -> None:
    from playwright.sync_api import expect

    store_graded(walk.db_file, slug=RATED_SLUG, email=LEARNER_OF[zone], assignment_id=walk.speed,
                 created_at=datetime.now(UTC))  # fmt: skip
    page = _learner(browser, walk, zone)
    page.clock.install()
    page.goto(_under(walk, walk.speed, RATED_SLUG))
    submit = page.get_by_role("button", name="Submit")
    wait = page.locator("#gate-wait")
    expect(submit).to_be_disabled()
    expect(wait).to_contain_text(re.compile(r"^You can submit again in (9 min( \d+ s)?|10 min)\.$"))
    before = wait.inner_text()
    page.clock.run_for(61_000)
    expect(wait).not_to_have_text(before)  # it counts down
    page.clock.run_for(600_000)
    expect(submit).to_be_enabled()
    expect(wait).to_be_hidden()
    assert page.problems == []


@ZONES
def test_the_course_context_stays_and_staff_find_their_tools(walk: Walk, browser: Any, zone: str) -> None:
    from playwright.sync_api import expect

    store_graded(walk.db_file, slug=CODE_SLUG, email=LEARNER_OF[zone], assignment_id=walk.week)
    page = _learner(browser, walk, zone)
    page.goto(_under(walk, walk.week, CODE_SLUG))
    page.locator("#standing-history").click()
    crumbs = page.get_by_role("navigation", name="Breadcrumb")
    expect(crumbs).to_contain_text("Walk 101")
    expect(crumbs.get_by_role("link", name="Week 1")).to_be_visible()

    page.goto(f"{walk.base}/courses/{COURSE}/grades")
    link = page.locator("#my-grades").get_by_role("link", name="Split a batch like DataParallel's scatter")
    expect(link).to_have_attribute("href", f"/courses/{COURSE}/assignments/{walk.week}/exercises/{CODE_SLUG}")
    page.goto(_under(walk, walk.quiz, QUIZ_SLUG))
    expect(page.get_by_role("button", name="Check my answers")).to_have_class(re.compile("primary"))
    assert page.problems == []

    ta = watched_page(browser, timezone_id=zone)
    log_in(ta, walk.base, "tam@example.com")
    ta.goto(f"{walk.base}/courses/{COURSE}")
    card = ta.locator(f"#assignment-{walk.week}")
    expect(card.get_by_role("link", name="Grading of Week 1")).to_be_visible()
    expect(card.get_by_role("link", name="Similarity in Week 1")).to_be_visible()
    card.get_by_role("link", name=re.compile("what the class gets wrong")).click()
    expect(ta.get_by_role("heading", level=1)).to_contain_text("What the class gets wrong")
    expect(ta.locator("#summary")).to_be_visible()
    assert ta.problems == []
