"""``/api/me/tokens``: my personal access tokens of the API: make one (shown once), list them, revoke one.

Contract: only a logged-in session manages tokens (a token cannot, ``app.web.deps.TOKENLESS_PATHS``). ``POST``
answers 201 with the token itself, which is never shown again; the list has every token of mine, unrevoked
first, with its prefix, scopes, last use and revocation, never the token. Revoking another user's token is 404.
How a token is used, and which scope each call needs: ``docs/api.md`` and ``app.web.deps.required_scope``.
"""

from __future__ import annotations

from fastapi import APIRouter

from app.domain.accounts import tokens
from app.web.deps import CurrentUser, RowId, SessionDep
from app.web.errors import problem_responses
from app.web.schemas.auth import TokenCreated, TokenIn, TokenOut

router = APIRouter(prefix="/api/me/tokens", tags=["tokens"])

CREATE_ERRORS = problem_responses(
    403, 409, 422,
    described={
        403: "The staff scope for someone who is not staff (or a cross-site request, or a token)",
        409: "Too many unrevoked tokens: revoke one first",
        422: "No scope, an unknown scope, or a name that is empty, too long or not printable",
    },
)  # fmt: skip


@router.get("")
def list_my_tokens(user: CurrentUser, session: SessionDep) -> list[TokenOut]:
    """List my access tokens (never the tokens themselves)."""
    return [TokenOut.of(row) for row in tokens.list_tokens(session=session, user=user)]


@router.post("", status_code=201, responses=CREATE_ERRORS)
def create_my_token(body: TokenIn, user: CurrentUser, session: SessionDep) -> TokenCreated:
    """Make an access token; the answer holds the token, shown this once."""
    row, token = tokens.create_token(session=session, user=user, name=body.name, scopes=body.scopes)
    session.commit()
    return TokenCreated(**TokenOut.of(row).model_dump(), token=token)


@router.post("/{token_id}/revoke", responses=problem_responses(404))
def revoke_my_token(token_id: RowId, user: CurrentUser, session: SessionDep) -> TokenOut:
    """Revoke one of my access tokens: it is refused from now on."""
    row = tokens.revoke_token(session=session, user=user, token_id=token_id)
    session.commit()
    return TokenOut.of(row)
