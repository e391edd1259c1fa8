"""axe-core on every page of the graded course's walk, as the role that uses it, in two viewers' time zones.

axe-core (pinned in ``frontend/package.json``, installed by ``scripts/setup``; missing, it fails the test under
``CI=true``) is injected into each page after it loaded and its scripts ran; any WCAG 2 A/AA finding
(``course_walk.AXE_TAGS``) fails the test with the rule, the page and the elements. The exercise page is checked
in its three views (the editor, a graded result, a refusal under it) and ``/docs`` with an operation opened too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e import course_walk as cw
from tests.e2e.conftest import serve_gpulab

pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def axe() -> str:
    return cw.axe_source()


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory, browser: Any) -> Iterator[cw.Walk]:
    data = tmp_path_factory.mktemp("walk-a11y")
    with serve_gpulab(data, cw.USERS) as base:
        yield cw.seed_walk(browser, base, data / "gpulab.db")


@pytest.mark.parametrize("zone", cw.ZONES)
def test_every_page_of_the_walk_has_no_wcag_finding(walk: cw.Walk, browser: Any, axe: str, zone: str) -> None:
    opened = cw.logged_in_pages(browser, walk.base, zone)
    found: dict[str, list[str]] = {}
    checked = 0

    def check(page: Any, where: str) -> None:
        nonlocal checked
        cw.settle(page)
        if findings := cw.axe_findings(page, axe):
            found[where] = findings
        checked += 1

    try:
        for role, path in cw.pages(walk):
            page = opened[role]
            answer = page.goto(f"{walk.base}{path}")
            assert answer is not None and answer.ok, f"{path} as {role}: {answer.status if answer else 'no answer'}"
            if path == "/docs":
                page.locator(".opblock").first.wait_for(timeout=30_000)  # Swagger UI drew the operations
            check(page, f"{path} as {role or 'anonymous'}")
        docs = opened[None]
        docs.goto(f"{walk.base}/docs")
        docs.locator(".opblock-summary-control").first.click()
        docs.locator(".try-out__btn").first.click()  # the operation opened, ready to be tried
        docs.locator("textarea.body-param__text").wait_for()
        docs.locator(".opblock-summary").first.hover()  # its "copy path" button shows on hover
        check(docs, "/docs with an operation opened to try")

        # The exercise page's other two views: a graded result below the editor, and a refusal under it.
        page = opened[cw.LEARNER]
        page.goto(f"{walk.base}/courses/{cw.COURSE}/assignments/{walk.assignment_id}/exercises/{cw.CODE}")
        page.locator("#result-verdict").wait_for()  # the last attempt's result
        check(page, "exercise page with a result")
        page.evaluate("() => window.gpulabExercise.editor().setValue('x = 1\\n' + '#'.repeat(70 * 1024))")
        page.get_by_role("button", name="Submit").click()
        page.locator("#submit-error").wait_for()
        check(page, "exercise page with an error")
        for page in opened.values():
            assert page.problems == [], page.problems
    finally:
        for page in opened.values():
            page.context.close()
    assert checked == len(cw.pages(walk)) + 3
    assert found == {}, "\n".join(f"{where}:\n  " + "\n  ".join(lines) for where, lines in found.items())
