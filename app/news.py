"""In-process news of submissions whose status changed, so live status streams wake at once instead of polling.

Contract: ``publish(submission_id)`` is called (from any thread) after a transaction that changed the
submission's status or verdict committed; every ``Subscription`` to that id opened in this process (an SSE
stream on an event loop) wakes. News is a hint only: the stream re-reads the database after waking and
still polls at its own interval, because the grading may happen in another process (a Celery worker) that
cannot reach this one. Nothing is queued: a publication with no subscriber is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType

_lock = threading.Lock()
_subscribers: dict[str, set[Subscription]] = {}


class Subscription:
    """News of one submission for one stream: ``async with``, then ``await wait(timeout_s)`` between reads."""

    def __init__(self, submission_id: str) -> None:
        self.submission_id = submission_id
        self._event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def __aenter__(self) -> Subscription:
        self._loop = asyncio.get_running_loop()
        with _lock:
            _subscribers.setdefault(self.submission_id, set()).add(self)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with _lock:
            subscribers = _subscribers.get(self.submission_id)
            if subscribers is not None:
                subscribers.discard(self)
                if not subscribers:
                    del _subscribers[self.submission_id]

    def _wake(self) -> None:
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the stream's loop already closed: nobody is waiting
                self._loop.call_soon_threadsafe(self._event.set)

    async def wait(self, timeout_s: float) -> bool:
        """Wait for news or ``timeout_s``; return whether news came (and forget it)."""
        try:
            await asyncio.wait_for(self._event.wait(), timeout_s)
        except TimeoutError:
            return False
        finally:
            self._event.clear()
        return True


def publish(submission_id: str) -> None:
    """Wake every stream of ``submission_id`` in this process (call after the commit)."""
    with _lock:
        subscribers = list(_subscribers.get(submission_id, ()))
    for subscription in subscribers:
        subscription._wake()


def subscriber_count(submission_id: str) -> int:
    """Return how many streams listen to ``submission_id`` here (for tests and diagnostics)."""
    with _lock:
        return len(_subscribers.get(submission_id, ()))
