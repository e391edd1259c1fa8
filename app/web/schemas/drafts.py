"""Draft bodies: what a page saves as the learner works, and what it gets back."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from app.domain.models import Draft
from app.domain.platform.clock import UtcDatetime
from app.web.schemas.common import AssignmentRef, StrictIn


class DraftIn(StrictIn):
    """``{"base_revision": 3, "code": "..."}`` for a code exercise, or ``"answers": {...}`` for a quiz."""

    base_revision: int = Field(
        ge=0, le=2**31 - 1, description="the revision the page started from (0: it had none); another one is a 409"
    )
    code: str | None = Field(default=None, description="the editor's text (code exercises)")
    answers: dict[str, list[str] | str] | None = Field(
        default=None, description="the answers so far (quizzes): option ids, or text; may be empty"
    )
    assignment_id: AssignmentRef = None


class StaffDraftOut(BaseModel):
    """A learner's draft on a timed assessment whose time has ended, as staff read it."""

    email: str
    exercise: str
    code: str | None
    answers: dict[str, Any] | None
    updated_at: UtcDatetime
    ended_at: UtcDatetime = Field(description="when the learner's time ended")
    submitted: str | None = Field(description="the submission the end made of this draft, if it made one")


class DraftOut(BaseModel):
    """The stored draft; ``revision`` 0 and no content when there is none (the page shows the starter)."""

    revision: int
    code: str | None = None
    answers: dict[str, Any] | None = None
    updated_at: UtcDatetime | None = None

    @classmethod
    def of(cls, draft: Draft | None) -> DraftOut:
        if draft is None:
            return cls(revision=0)
        updated: datetime = draft.updated_at
        return cls(revision=draft.revision, code=draft.code, answers=draft.answers, updated_at=updated)
