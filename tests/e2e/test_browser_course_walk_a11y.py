"""axe-core on every page of the graded course's walk, as the role that uses it, in two viewers' time zones.

axe-core (pinned in ``frontend/package.json``, installed by ``scripts/setup``) is injected into each page after it
loaded and its scripts ran; any WCAG 2 A/AA finding (``wcag2a``, ``wcag2aa``, ``wcag21a``, ``wcag21aa``,
``wcag22aa``) fails the test with the rule, the page and the elements. The exercise page is checked in its three
views too: the editor, a graded result, and a run that failed to start.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import serve_gpulab
from tests.e2e.course_walk import CODE, COURSE, LEARNER, USERS, ZONES, Walk, logged_in_pages, pages, seed_walk
from tests.support import REPO_ROOT

pytestmark = [pytest.mark.browser, pytest.mark.slow]
AXE = REPO_ROOT / "frontend" / "node_modules" / "axe-core" / "axe.min.js"
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]


@pytest.fixture(scope="module")
def axe_source() -> str:
    """axe-core's script (fails under CI when scripts/setup has not installed it)."""
    if not AXE.is_file():
        if os.environ.get("CI") == "true":
            pytest.fail(f"axe-core is not installed at {AXE}: run scripts/setup")
        pytest.skip("axe-core is not installed (scripts/setup installs it with npm)")
    return AXE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def walk(tmp_path_factory: pytest.TempPathFactory, browser: Any) -> Iterator[Walk]:
    data = tmp_path_factory.mktemp("walk-a11y")
    with serve_gpulab(data, USERS) as base:
        yield seed_walk(browser, base, data / "gpulab.db")


def settle(page: Any) -> None:
    """Wait until the page's scripts ran and two frames were drawn (times localised, scroll boxes marked)."""
    page.wait_for_load_state("load")
    page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")


def axe_findings(page: Any, source: str) -> list[str]:
    """Run axe-core on the page; return one line per violation and element."""
    if not page.evaluate("() => Boolean(window.axe)"):
        page.evaluate(source + "\n;undefined")
    result = page.evaluate(
        "(tags) => axe.run(document, { runOnly: { type: 'tag', values: tags }, resultTypes: ['violations'] })", TAGS
    )
    return [
        f"{v['id']} ({v['impact']}): {node['target']} {node.get('failureSummary', '')[:200]}"
        for v in result["violations"]
        for node in v["nodes"]
    ]


@pytest.mark.parametrize("zone", ZONES)
def test_every_page_of_the_walk_has_no_wcag_finding(walk: Walk, browser: Any, axe_source: str, zone: str) -> None:
    opened = logged_in_pages(browser, walk.base, zone)
    found: dict[str, list[str]] = {}
    checked = 0
    try:
        for role, path in pages(walk):
            page = opened[role]
            answer = page.goto(f"{walk.base}{path}")
            assert answer is not None and answer.ok, f"{path} as {role}: {answer.status if answer else 'no answer'}"
            if path == "/docs":
                page.locator(".opblock").first.wait_for(timeout=30_000)  # Swagger UI drew the operations
            settle(page)
            if findings := axe_findings(page, axe_source):
                found[f"{path} as {role or 'anonymous'}"] = findings
            checked += 1
        # The exercise page's other two views: a graded result shown below the editor, and an error under it.
        page = opened[LEARNER]
        page.goto(f"{walk.base}/courses/{COURSE}/assignments/{walk.assignment_id}/exercises/{CODE}")
        page.locator("#result-verdict").wait_for()  # the last attempt's result
        settle(page)
        if findings := axe_findings(page, axe_source):
            found["exercise page with a result"] = findings
        page.evaluate("() => window.gpulabExercise.editor().setValue('x = 1\\n' + '#'.repeat(70 * 1024))")
        page.get_by_role("button", name="Submit").click()
        page.locator("#submit-error").wait_for()
        settle(page)
        if findings := axe_findings(page, axe_source):
            found["exercise page with an error"] = findings
        checked += 2
    finally:
        for page in opened.values():
            page.context.close()
    assert checked == len(pages(walk)) + 2
    assert found == {}, "\n".join(f"{where}:\n  " + "\n  ".join(lines) for where, lines in found.items())
