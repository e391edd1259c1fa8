"""``worker.core.humane``: one format for numbers, durations and sizes, the same as ``app.js`` writes them."""

from __future__ import annotations

import math

import pytest

from worker.core import humane


@pytest.mark.parametrize(
    ("value", "decimals", "text"),
    [
        (2 / 3, 2, "0.67"),
        (14 / 3, 2, "4.67"),
        (4.0, 2, "4"),
        (13140.0, 2, "13,140"),
        (1e20, 2, "100,000,000,000,000,000,000"),  # never an exponent
        (-0.001, 2, "0"),
        (66.666, 1, "66.7"),
        (None, 2, "\u2013"),
        (math.nan, 2, "\u2013"),
    ],
)
def test_number_rounds_and_drops_trailing_zeros(value: float | None, decimals: int, text: str) -> None:
    assert humane.number(value, decimals) == text


@pytest.mark.parametrize(
    ("ms", "text"),
    [(850.4, "850 ms"), (13_140, "13.1 s"), (200_000, "3.3 min"), (2 * 3600_000, "2 h"), (None, "\u2013")],
)
def test_duration_picks_the_unit_people_read(ms: float | None, text: str) -> None:
    assert humane.duration_ms(ms) == text


def test_sizes_round_up_so_an_oversize_never_reads_as_the_limit() -> None:
    assert humane.size(64 * 1024) == "64 KB" and humane.size(64 * 1024 + 1) == "65 KB"
    assert humane.size(3 * 1024 * 1024 // 2) == "1.5 MB"
    assert humane.points(14 / 3, 10) == "4.67/10" and humane.percent(200 / 3) == "66.7%"


def test_the_size_sentence_names_the_size_the_limit_and_the_fix() -> None:
    assert humane.code_too_large(80 * 1024, 64 * 1024) == (
        "Your code is 80 KB; the limit is 64 KB. Shorten it (remove long comments, pasted output or data) and "
        "submit again."
    )
    unknown = humane.too_large("The file", None, 256 * 1024, "Split it.")
    assert unknown == "The file is over the limit of 256 KB. Split it."


def test_a_time_in_a_sentence_is_written_in_utc_and_found_again() -> None:
    from datetime import datetime, timedelta, timezone

    berlin = datetime(2026, 12, 9, 18, 0, tzinfo=timezone(timedelta(hours=1)))
    sentence = f"due on {humane.utc_text(berlin)}; closed on {humane.utc_text(datetime(2026, 12, 9, 17, 30))}"
    assert sentence == "due on 2026-12-09 17:00 UTC; closed on 2026-12-09 17:30 UTC"
    found = [m.groups() for m in humane.UTC_TIME_RE.finditer(sentence)]
    assert found == [("2026-12-09", "17:00"), ("2026-12-09", "17:30")]
    assert humane.utc_text(None) == ""
