"""Audit entries and data requests as the API answers them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.domain.audit.trail import Row
from app.domain.platform.clock import UtcDatetime


class AuditEntryOut(BaseModel):
    id: int
    at: UtcDatetime
    actor: str = Field(description='who did it: a name, "gpulab" (the platform itself) or "erased user"')
    course: str = Field(description="the course's slug; empty for a site-wide entry")
    action: str = Field(description="e.g. grade.override, extension.grant, member.role, course.archive")
    subject: str = Field(description="the person it concerns, if any")
    target: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    @classmethod
    def of(cls, row: Row) -> AuditEntryOut:
        return cls(**row.__dict__)


class EraseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    confirm_email: str = Field(max_length=320, description="the person's e-mail address again, as a safeguard")
    code: Literal["delete", "pseudonymize"] | None = Field(
        default=None, description="their submissions' code (default: the site's GPULAB_ERASURE_CODE)"
    )
