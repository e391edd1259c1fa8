"""gpulab's own signing keys: RSA 2048, RS256, made at first use, rotated, published as a JWKS.

Contract:
- The newest key without ``retired_at`` signs (``signing_key``, ``sign``); the first call that needs a key when
  none is current makes one (two processes racing both make one: both are valid, the newer signs).
- ``jwks(session=..., grace_s=...)`` is gpulab's public JWK Set: the current key and every key retired less than
  ``grace_s`` ago, so a platform that cached the old set, or a message signed just before a rotation, still
  verifies. Private parts are never in it.
- ``rotate`` retires every current key and makes a new one, which signs from then on.
- Each key's ``kid`` is its RFC 7638 thumbprint. The private key is stored as PKCS#8 PEM in the database, which
  is as secret as the session key; whoever can read it can sign as gpulab.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from joserfc import jwt
from joserfc.jwk import RSAKey
from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from app.domain.models import LtiToolKey, utcnow

KEY_BITS = 2048
ALGORITHM = "RS256"  # the one LTI 1.3 requires every party to support
_PARAMETERS: dict[str, Any] = {"use": "sig", "alg": ALGORITHM}


def _make_key(*, session: Session) -> LtiToolKey:
    key = RSAKey.generate_key(KEY_BITS, parameters=_PARAMETERS, auto_kid=True)  # type: ignore[arg-type]
    row = LtiToolKey(
        kid=str(key.kid),
        private_pem=key.as_pem(private=True).decode("ascii"),
        public_jwk=dict(key.as_dict(private=False)),
    )
    session.add(row)
    session.flush()
    return row


def current(*, session: Session) -> LtiToolKey:
    """Return the key that signs now, making the first one if there is none."""
    row = session.scalar(
        select(LtiToolKey).where(LtiToolKey.retired_at.is_(None)).order_by(LtiToolKey.id.desc()).limit(1)
    )
    return row if row is not None else _make_key(session=session)


def signing_key(*, session: Session) -> RSAKey:
    """Return the current key as a joserfc private key (with its ``kid``)."""
    row = current(session=session)
    return RSAKey.import_key(row.private_pem, parameters={**_PARAMETERS, "kid": row.kid})  # type: ignore[arg-type]


def sign(*, session: Session, claims: dict[str, Any]) -> str:
    """Return ``claims`` as a JWT signed with the current key (RS256, its ``kid`` in the header)."""
    key = signing_key(session=session)
    return jwt.encode({"alg": ALGORITHM, "kid": str(key.kid)}, claims, key, algorithms=[ALGORITHM])


def jwks(*, session: Session, grace_s: int) -> dict[str, list[dict[str, Any]]]:
    """Return gpulab's public JWK Set: the current key and the keys retired within ``grace_s``."""
    current(session=session)
    since = utcnow() - timedelta(seconds=grace_s)
    rows = session.scalars(
        select(LtiToolKey)
        .where(or_(LtiToolKey.retired_at.is_(None), LtiToolKey.retired_at > since))
        .order_by(LtiToolKey.id.desc())
    )
    return {"keys": [dict(row.public_jwk) for row in rows]}


def rotate(*, session: Session) -> LtiToolKey:
    """Retire the current key(s) and return a new one, which signs from now on."""
    now = utcnow()
    for row in session.scalars(select(LtiToolKey).where(LtiToolKey.retired_at.is_(None))):
        row.retired_at = now
    return _make_key(session=session)
