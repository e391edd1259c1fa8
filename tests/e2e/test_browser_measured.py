"""A measured-outcome exercise in a real headless Chromium: a learner submits gradient accumulation that syncs on
every micro-batch (``torch-ddp-grad-accum``'s wrong variant), the real sandbox runs two gloo ranks and measures
their communication, and the result shows each measurement beside its target, partial credit, the charts, and
the "modelled" label on every figure of the cost model.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import SCREENSHOTS, log_in, serve_gpulab, watched_page
from tests.support import REPO_ROOT, bank_file

pytestmark = [pytest.mark.browser, pytest.mark.slow]
SLUG = "torch-ddp-grad-accum"
USERS = (("ada@example.com", "learner"),)
GRADING_MS = 300_000  # two ranks of torch on two cores shared with other test runs


@pytest.fixture(scope="module")
def measured_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Serve a bank of the one measured exercise."""
    bank = tmp_path_factory.mktemp("bank")
    shutil.copytree(REPO_ROOT / "exercises" / SLUG, bank / SLUG)
    with serve_gpulab(tmp_path_factory.mktemp("measured"), USERS, exercises_dir=str(bank)) as base:
        yield base


@pytest.mark.timeout(600)  # the server's start, torch in two sandboxes and two ranks, on shared cores
def test_result_shows_measurements_beside_targets_with_the_modelled_label(measured_server: str, browser: Any) -> None:
    from playwright.sync_api import expect

    page = watched_page(browser)
    base = measured_server
    log_in(page, base, "ada@example.com", landing=f"/exercises/{SLUG}")
    wrong = bank_file(SLUG, "wrong/sync_every_micro_batch.py")
    page.evaluate("(code) => window.gpulabExercise.editor().setValue(code)", wrong)
    page.get_by_role("button", name="Submit").click()
    expect(page.locator("#result-verdict")).to_have_text("failed", timeout=GRADING_MS)

    section = page.locator("#result-measurements")
    expect(section).to_be_visible()
    calls = section.locator("tr", has_text="collective calls per optimizer step")
    # 11 all-reduces for 3 steps per epoch: 3.67 per step against a target of exactly 1, partial credit.
    expect(calls.locator("td").nth(1)).to_have_text("3.667 calls")
    expect(calls.locator("td").nth(2)).to_have_text("= 1 calls")
    expect(calls.locator("td").nth(3)).to_have_text("missed")
    nbytes = section.locator("tr", has_text="bytes all-reduced per optimizer step")
    expect(nbytes.locator("td").nth(1)).to_have_text("718.7 B")
    expect(nbytes.locator("td").nth(2)).to_have_text("<= 196 B")
    steps = section.locator("tr", has_text="optimizer steps per rank")
    expect(steps.locator("td").nth(3)).to_have_text("met")
    row = page.locator("#result-tests tr", has_text="test_one_allreduce_per_step")
    expect(row.locator("td").nth(2)).to_have_text("0.33 / 3")  # (4 - 3.67) / (4 - 1) of 3 points
    expect(page.locator("#result-tests tr.feedback", has_text="you synced every micro-batch")).to_have_count(1)
    expect(page.locator("#result-tests tr.feedback", has_text="sent 719 bytes per optimizer step")).to_have_count(1)

    # Every figure of the cost model carries the label and its basis; no measured figure does.
    modelled = section.locator("tr", has=page.locator(".badge.modelled"))
    expect(modelled).to_have_count(2)
    for i in range(2):
        expect(modelled.nth(i)).to_contain_text("modelled")
        expect(modelled.nth(i).locator(".basis")).to_contain_text("PCIe-class link")
    expect(calls.locator(".badge.modelled")).to_have_count(0)

    # Two charts: bytes per step (bars, with the target line) and the modelled speed-up against ranks (lines).
    expect(section.locator("figure")).to_have_count(2)
    bars = section.locator("figure", has_text="bytes all-reduced per optimizer step")
    expect(bars.locator("rect")).to_have_count(6)
    expect(bars).to_contain_text("target 196")
    lines = section.locator("figure", has_text="speed-up")
    expect(lines.locator("figcaption")).to_have_text("Modelled: speed-up over one device")
    expect(lines.locator("path")).to_have_count(2)
    expect(lines).to_contain_text("NVLink-class")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    section.screenshot(path=str(SCREENSHOTS / "measured-result.png"))
    assert page.problems == []
