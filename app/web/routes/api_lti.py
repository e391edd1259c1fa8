"""``GET /api/admin/lti/outbox``: the LTI scores gpulab still owes platforms' gradebooks, for staff.

Contract: admins only (``AdminDep``: 401 logged out, 403 for everyone else). Lists the unsent rows of
``app.domain.lti.scores`` (pending and failing alike), the ones waiting longest first, with their attempts, the
last error and when the next try is; an empty list means every platform has every score.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel

from app.domain.lti import scores
from app.domain.models import LtiScoreOutbox
from app.web.deps import AdminDep, SessionDep
from app.web.errors import problem_responses

router = APIRouter(prefix="/api/admin/lti", tags=["admin"])


class OutboxRowOut(BaseModel):
    id: int
    platform_id: int
    link_id: int
    user_id: int
    lineitem_url: str
    payload: dict[str, Any]
    created_at: datetime
    attempts: int
    next_attempt_at: datetime
    last_error: str | None
    state: str  # "pending" (never tried) or "failed" (tried, waiting for its next attempt)


def _row_out(row: LtiScoreOutbox) -> OutboxRowOut:
    return OutboxRowOut(
        id=row.id, platform_id=row.platform_id, link_id=row.link_id, user_id=row.user_id,
        lineitem_url=row.lineitem_url, payload=dict(row.payload), created_at=row.created_at,
        attempts=row.attempts, next_attempt_at=row.next_attempt_at, last_error=row.last_error,
        state="failed" if row.attempts else "pending",
    )  # fmt: skip


@router.get("/outbox", responses=problem_responses(401, 403))
def outbox(_admin: AdminDep, session: SessionDep) -> list[OutboxRowOut]:
    """List the scores not yet taken by their platform, with attempts, last error and next attempt."""
    return [_row_out(row) for row in scores.outbox(session=session)]
