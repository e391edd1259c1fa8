"""Rate limits shared by every API process: the one place that builds the ``limits`` storage and strategy.

Contract:
- ``limiter_for(settings)`` returns a ``Limiter`` (``create_app`` makes one per app): a moving window on the
  broker's Redis when ``settings.broker_url`` is set, so every API process counts the same hits; in memory
  when it is not (the embedded default serves from one process).
- A ``Rule`` is an amount per window, identified by its name; ``hit``/``allowed``/``retry_after_s``/``clear``
  take the rule and the key parts (e-mail, IP, user id...). ``retry_after_s`` is whole seconds, at least 1.
- Redis unreachable fails *soft*, neither open nor closed: the limiter counts in its own in-memory window
  for ``OUTAGE_RETRY_S`` and then tries Redis again. Fail-closed would lock every learner out of logging in
  for as long as Redis is away (and the rest of the platform is built to ride out a Redis outage: submissions
  wait ``queued``); fail-open would drop brute-force protection altogether. Per-process counting is what a
  single process always had, at worst the limit times the number of processes, and scrypt bounds guessing
  anyway. Redis calls have short socket timeouts, so a Redis that hangs costs one slow call per outage period.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from limits import RateLimitItem, RateLimitItemPerSecond
from limits.errors import StorageError
from limits.storage import MemoryStorage, RedisStorage, Storage
from limits.strategies import MovingWindowRateLimiter

if TYPE_CHECKING:
    from collections.abc import Callable

    from app.settings import Settings

log = logging.getLogger(__name__)
OUTAGE_RETRY_S = 5.0  # after a Redis failure, count in memory this long before trying Redis again
REDIS_TIMEOUT_S = 0.5  # connect and read timeout of every limiter call to Redis
KEY_PREFIX = "gpulab-limits"
T = TypeVar("T")


@dataclass(frozen=True)
class Rule:
    """At most ``amount`` hits per ``window_s`` seconds for each key, counted under ``name``."""

    name: str
    amount: int
    window_s: float

    @property
    def item(self) -> RateLimitItem:
        # limits counts whole seconds; a fractional window rounds up, never shorter than asked.
        return RateLimitItemPerSecond(self.amount, max(1, math.ceil(self.window_s)), namespace=self.name)


class Limiter:
    """Moving-window counters on a shared storage, falling back to memory while the shared one is down."""

    def __init__(self, shared: Storage | None = None) -> None:
        self._local = MovingWindowRateLimiter(MemoryStorage())
        self._shared = MovingWindowRateLimiter(shared) if shared is not None else None
        self._shared_again_at = 0.0  # monotonic time from which the shared storage is tried again
        self._lock = threading.Lock()

    @property
    def is_shared(self) -> bool:
        return self._shared is not None

    def _run(self, operation: Callable[[MovingWindowRateLimiter], T]) -> T:
        shared = self._shared
        if shared is not None and time.monotonic() >= self._shared_again_at:
            try:
                return operation(shared)
            except StorageError as exc:
                with self._lock:
                    self._shared_again_at = time.monotonic() + OUTAGE_RETRY_S
                log.warning(
                    "rate limits: Redis unreachable (%s); counting in this process for %.0f s",
                    exc.storage_error,
                    OUTAGE_RETRY_S,
                )
        return operation(self._local)

    def hit(self, rule: Rule, *key: str) -> bool:
        """Count one hit for ``key``; return False (and count nothing) when the key has used up ``rule``."""
        return self._run(lambda strategy: strategy.hit(rule.item, *key))

    def allowed(self, rule: Rule, *key: str) -> bool:
        """Say whether ``key`` may take one more hit under ``rule``, without counting it."""
        return self._run(lambda strategy: strategy.test(rule.item, *key))

    def retry_after_s(self, rule: Rule, *key: str) -> int:
        """Return the whole seconds until ``key`` may take a hit again (at least 1)."""
        stats = self._run(lambda strategy: strategy.get_window_stats(rule.item, *key))
        return max(1, math.ceil(stats.reset_time - time.time()))

    def clear(self, rule: Rule, *key: str) -> None:
        """Forget every hit of ``key`` under ``rule``."""
        self._run(lambda strategy: strategy.clear(rule.item, *key))


def make_limiter(redis_url: str = "") -> Limiter:
    """Return a new limiter on ``redis_url``'s Redis, or in memory when it is empty."""
    if not redis_url:
        return Limiter()
    storage = RedisStorage(
        redis_url,
        wrap_exceptions=True,  # every Redis failure arrives as limits' StorageError, which Limiter handles
        key_prefix=KEY_PREFIX,
        socket_timeout=REDIS_TIMEOUT_S,
        socket_connect_timeout=REDIS_TIMEOUT_S,
    )
    return Limiter(storage)


def limiter_for(settings: Settings) -> Limiter:
    """Return a limiter for ``settings``: on the broker's Redis when one is set, else in memory."""
    return make_limiter(settings.broker_url)
