"""How numbers, durations and sizes read for people: one format for pages, stored messages and errors.

Contract: ``number`` rounds to at most ``decimals`` places and drops trailing zeros (``0.67``, ``4``, ``13,140``;
never an exponent); ``points`` is ``4.67/10``; ``duration_ms`` picks the unit a person reads (``850 ms``,
``13.1 s``, ``2.5 min``, ``1.2 h``); ``size`` is bytes in KB or MB (1 KB = 1024 bytes, rounded up so a size
over a limit never reads as the limit); ``too_large`` is the one sentence for anything over a size limit.
``utc_text`` is how a time stands in a sentence (``2026-12-09 17:00 UTC``); ``UTC_TIME_RE`` finds those times
again, so a page can show each in its viewer's zone (``app.web.pages.timed_text``).
``app/static/app.js`` (``gpulab.num``, ``gpulab.duration``, ``gpulab.tooLarge``) mirrors these rules for what
scripts write, so a number reads the same on every page.

Kept by hand: the rules are a few lines that must match the page script exactly; a locale library (Babel)
would format differently from the browser and add a dependency for no reader we have (pages are English).
This module imports nothing of ours.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

KB = 1024
UTC_TIME_RE = re.compile(r"(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}) UTC")  # what utc_text writes
NONE = "\u2013"  # an en dash: what a table shows for no value


def number(value: float | None, decimals: int = 2) -> str:
    """Format ``value`` rounded to ``decimals`` places without trailing zeros, or a dash for none."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return NONE
    text = f"{round(float(value), decimals):,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


def points(score: float | None, max_score: float | None) -> str:
    """Format a score out of its maximum as ``4.67/10``."""
    return f"{number(score)}/{number(max_score)}"


def percent(value: float | None, decimals: int = 1) -> str:
    """Format a percentage as ``66.7%``."""
    return NONE if value is None else f"{number(value, decimals)}%"


def duration_ms(value: float | None) -> str:
    """Format milliseconds in the unit a person reads: ``850 ms``, ``13.1 s``, ``2.5 min``, ``1.2 h``."""
    if value is None:
        return NONE
    if value < 1000:
        return f"{number(value, 0)} ms"
    seconds = value / 1000
    if seconds < 100:
        return f"{number(seconds, 1)} s"
    if seconds < 5400:
        return f"{number(seconds / 60, 1)} min"
    return f"{number(seconds / 3600, 1)} h"


def size(n_bytes: int) -> str:
    """Format a size in KB (or MB from 1 MB), rounded up: ``80 KB``, ``1.5 MB``."""
    if n_bytes >= KB * KB:
        return f"{number(math.ceil(n_bytes * 10 / (KB * KB)) / 10, 1)} MB"
    return f"{math.ceil(n_bytes / KB)} KB"


def too_large(what: str, size_bytes: int | None, limit_bytes: int, fix: str) -> str:
    """Say that ``what`` (e.g. "Your code") is over ``limit_bytes`` and what to do: ``fix`` (a sentence)."""
    if size_bytes is None:
        return f"{what} is over the limit of {size(limit_bytes)}. {fix}"
    return f"{what} is {size(size_bytes)}; the limit is {size(limit_bytes)}. {fix}"


CODE_FIX = "Shorten it (remove long comments, pasted output or data) and submit again."


def code_too_large(size_bytes: int | None, limit_bytes: int) -> str:
    """Say that a learner's code is over the code limit, in the learner's words."""
    return too_large("Your code", size_bytes, limit_bytes, CODE_FIX)


NOTEBOOK_FIX = (
    "Outputs (plots, printed data) make a notebook large and are never graded: clear them (in Jupyter: Edit, Clear "
    "Outputs of All Cells), save the notebook and submit it again."
)


def notebook_too_large(size_bytes: int | None, limit_bytes: int) -> str:
    """Say that an uploaded notebook is over its limit and how to make it fit (the body limit and the check)."""
    return too_large("The notebook", size_bytes, limit_bytes, NOTEBOOK_FIX)


def utc_text(value: datetime | None) -> str:
    """Write ``value`` as ``YYYY-MM-DD HH:MM UTC`` (a naive datetime is taken as UTC), or "" for none."""
    if value is None:
        return ""
    at = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return at.strftime("%Y-%m-%d %H:%M UTC")
