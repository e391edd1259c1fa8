"""Rubrics: the items staff grade against (a code exercise's ``rubric``, a text question's), and their score.

Contract:
- ``RubricItem`` is one line of a rubric: an id, what staff look for, and the points it adds (or, negative,
  takes); an item worth 0 is refused.
- ``score_items`` adds the points of the checked items and clamps the sum to the range the caller gives.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated

from pydantic import Field, field_validator

from worker.bank.formatkit import FormatModel, Id, Required

RubricPoints = Annotated[float, Field(strict=True, ge=-100, le=100)]


class RubricItem(FormatModel):
    """One line of a rubric: what staff look for, and the points it adds (or, negative, takes)."""

    id: Id
    text: Required
    points: RubricPoints

    @field_validator("points")
    @classmethod
    def _not_zero(cls, points: float) -> float:
        """Refuse an item worth nothing: it would change no grade."""
        if points == 0:
            raise ValueError("must not be 0: an item adds points (positive) or takes them off (negative)")
        return points


def score_items(items: Iterable[RubricItem], checked: Iterable[str], *, most: float, least: float) -> float:
    """Return the points of the checked rubric items, clamped to ``least``..``most``."""
    chosen = set(checked)
    total = sum(r.points for r in items if r.id in chosen)
    return round(min(most, max(least, total)), 6)
