"""The platforms' public keys: fetched from each registered JWKS URL, cached in this process.

Contract:
- ``PlatformKeys.key_for(jwks_url, kid)`` returns the platform's RSA verification key with that ``kid``. A set is
  fetched when first needed and again once it is older than ``max_age_s``; a ``kid`` the cached set lacks makes
  one fresh fetch right away (the platform rotated its keys), after which an unknown ``kid`` is ``Unauthorized``.
  A token without ``kid`` is accepted only when the set has exactly one key.
- Forced fetches are bounded twice, per URL, so tokens with made-up kids (anyone can post one: the kid is read
  before any signature can be checked) cannot make gpulab hammer a platform, nor crowd out a real rotation:
  - per kid: a kid refetched for is not refetched for again within ``refetch_gap_s`` (the same made-up kid
    costs one fetch; a real key the platform publishes a little late is found by a launch after the gap);
  - overall: at most ``max_forced`` forced fetches in any ``forced_window_s``; beyond that an unknown kid is
    refused from the cached set until the window moves on. A made-up kid sent just before a launch signed
    with a freshly rotated key therefore no longer gets that launch refused: only ``max_forced`` distinct
    made-up kids within the window do.
  The kids remembered are only those that made a fetch within ``refetch_gap_s`` (at most ``max_forced`` per URL,
  and none longer than ``MAX_KID_CHARS``: such a kid is refused from the cache without a fetch).
- Keys that are not RSA signing keys, or that do not import, are left out of the set (a platform's set may
  also hold encryption keys). A set that cannot be fetched is ``Unauthorized``: the launch cannot be checked.
- One instance per app (``app.state``), shared by its request threads: it is locked; fetches happen outside the
  lock. ``now`` is injectable for tests.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from joserfc.errors import JoseError
from joserfc.jwk import RSAKey

from app.domain.lti import outbound
from worker.core.errors import InvalidInput, Unauthorized

MAX_AGE_S = 3600.0
REFETCH_GAP_S = 10.0
MAX_FORCED = 5
FORCED_WINDOW_S = 60.0
MAX_KID_CHARS = 255


@dataclass
class _Fetched:
    keys: dict[str, RSAKey]
    unnamed: list[RSAKey]
    fetched_at: float


def _import(jwks: dict[str, Any]) -> tuple[dict[str, RSAKey], list[RSAKey]]:
    """Return the RSA signing keys of a JWK Set by kid, and those without a kid."""
    by_kid: dict[str, RSAKey] = {}
    unnamed: list[RSAKey] = []
    entries = jwks.get("keys")
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or entry.get("kty") != "RSA" or entry.get("use", "sig") != "sig":
            continue
        try:
            key = RSAKey.import_key(entry)
        except (JoseError, ValueError, TypeError):
            continue  # one unusable key must not hide the others
        kid = entry.get("kid")
        if isinstance(kid, str) and kid:
            by_kid[kid] = key
        else:
            unnamed.append(key)
    return by_kid, unnamed


@dataclass
class PlatformKeys:
    """Platforms' JWK Sets by URL (see the module contract)."""

    timeout_s: float
    max_age_s: float = MAX_AGE_S
    refetch_gap_s: float = REFETCH_GAP_S
    max_forced: int = MAX_FORCED
    forced_window_s: float = FORCED_WINDOW_S
    now: Callable[[], float] = time.monotonic
    _sets: dict[str, _Fetched] = field(default_factory=dict)
    _tried: dict[str, dict[str | None, float]] = field(default_factory=dict)  # URL -> kid -> its forced fetch
    _forced: dict[str, deque[float]] = field(default_factory=dict)  # URL -> its forced fetches in the window
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _fetch(self, jwks_url: str) -> _Fetched:
        try:
            raw = outbound.get_json(jwks_url, timeout_s=self.timeout_s)
        except InvalidInput as exc:
            raise Unauthorized(f"could not fetch the platform's keys to check the launch: {exc.message}") from exc
        keys, unnamed = _import(raw)
        fetched = _Fetched(keys, unnamed, self.now())
        with self._lock:
            self._sets[jwks_url] = fetched
        return fetched

    def _cached(self, jwks_url: str) -> _Fetched | None:
        with self._lock:
            found = self._sets.get(jwks_url)
        if found is None or self.now() - found.fetched_at > self.max_age_s:
            return None
        return found

    def _may_force(self, jwks_url: str, kid: str | None) -> bool:
        """Say whether an unknown ``kid`` may make a fresh fetch now, and count it if so (see the contract)."""
        if kid is not None and len(kid) > MAX_KID_CHARS:
            return False
        with self._lock:
            now = self.now()
            tried = self._tried.setdefault(jwks_url, {})
            for old in [known for known, at in tried.items() if now - at >= self.refetch_gap_s]:
                del tried[old]
            forced = self._forced.setdefault(jwks_url, deque())
            while forced and now - forced[0] >= self.forced_window_s:
                forced.popleft()
            if kid in tried or len(forced) >= self.max_forced:
                return False
            tried[kid] = now
            forced.append(now)
            return True

    def key_for(self, jwks_url: str, kid: str | None) -> RSAKey:
        """Return the key named ``kid`` in the platform's set (see the module contract)."""
        fetched = self._cached(jwks_url)
        fresh = fetched is None
        if fetched is None:
            fetched = self._fetch(jwks_url)
        key = _pick(fetched, kid)
        if key is None and not fresh and self._may_force(jwks_url, kid):
            key = _pick(self._fetch(jwks_url), kid)  # the platform may have rotated its keys
        if key is None:
            if kid is None:
                raise Unauthorized("the launch token names no key (kid) and the platform publishes several")
            raise Unauthorized(f"the launch token is signed with a key ({kid}) the platform does not publish")
        return key


def _pick(fetched: _Fetched, kid: str | None) -> RSAKey | None:
    if kid is not None:
        return fetched.keys.get(kid)
    every = [*fetched.keys.values(), *fetched.unnamed]
    return every[0] if len(every) == 1 else None
