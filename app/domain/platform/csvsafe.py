"""CSV cells that a spreadsheet will not run: every CSV export writes its text cells through ``csv_cell``.

Contract: a cell starting with what a spreadsheet reads as a formula (``FORMULA_PREFIXES``: ``= + - @``, tab, CR) is
prefixed with ``'``; ``None`` is the empty cell. CSV imports use ``FORMULA_PREFIXES`` to spot the same cells.
"""

from __future__ import annotations

from typing import Any

FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: Any) -> str:
    """Return ``value`` as CSV cell text, prefixed with ``'`` where a spreadsheet would run it as a formula."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_PREFIXES) else text
