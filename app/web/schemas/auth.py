"""Bodies of signing in, the current account and API tokens."""

from __future__ import annotations

from pydantic import BaseModel, Field

from app.domain.accounts.tokens import Scope
from app.domain.models import (
    ApiToken,
    Role,
    User,
)
from app.domain.platform.clock import UtcDatetime
from app.web.schemas.common import LoginEmail, StrictIn


class LoginIn(StrictIn):
    email: LoginEmail
    password: str = Field(max_length=1024)


class MeOut(BaseModel):
    email: str
    role: Role
    must_change_password: bool = Field(
        default=False, description="a one-time password: POST /api/auth/password before anything else"
    )

    @classmethod
    def of(cls, user: User) -> MeOut:
        return cls(email=user.email, role=user.role, must_change_password=bool(user.must_change_password))


class TokenIn(StrictIn):
    name: str = Field(min_length=1, max_length=100, description="what the token is for, e.g. the machine")
    scopes: list[Scope] = Field(
        min_length=1, max_length=3, description="read: GET my work; submit: submit and run; staff: everything else"
    )


class TokenOut(BaseModel):
    """A token as its owner sees it in the list: never the token itself."""

    id: int
    name: str
    prefix: str
    scopes: list[Scope]
    created_at: UtcDatetime
    last_used_at: UtcDatetime | None
    revoked_at: UtcDatetime | None

    @classmethod
    def of(cls, row: ApiToken) -> TokenOut:
        return cls(
            id=row.id,
            name=row.name,
            prefix=row.prefix,
            scopes=[Scope(s) for s in row.scopes],
            created_at=row.created_at,
            last_used_at=row.last_used_at,
            revoked_at=row.revoked_at,
        )


class TokenCreated(TokenOut):
    token: str = Field(description="the token: shown this once, only its hash is kept")
