"""Shared pieces of the API bodies: the strict input base, e-mail fields, id references."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from app.domain.accounts.passwords import MAX_EMAIL_CHARS, check_email
from worker.core.errors import InvalidInput


def _checked_email(value: str) -> str:
    try:
        return check_email(value)
    except InvalidInput as exc:
        raise ValueError(exc.message) from exc  # pydantic reports a ValueError as a 422 with this message


LoginEmail = Annotated[str, Field(max_length=MAX_EMAIL_CHARS, json_schema_extra={"format": "email"})]
Email = Annotated[LoginEmail, AfterValidator(_checked_email)]


class StrictIn(BaseModel):
    # Unknown fields are refused, so a typo ("cod") is a clear 422, not a silently empty submission.
    model_config = ConfigDict(extra="forbid")


MAX_ID = 2**31 - 1  # the id columns are Integer (PostgreSQL int4)
AssignmentRef = Annotated[
    int | None,
    Field(default=None, ge=1, le=MAX_ID, description="the assignment this is submitted under (none: practice)"),
]
