"""News of submissions whose status changed, so live status streams wake at once instead of waiting to poll.

Contract: ``publish(submission_id)`` is called (from any thread, in whatever process graded) after a
transaction that changed the submission's status or verdict committed; every ``Subscription`` to that id
opened in this process (an SSE stream on an event loop) wakes. When ``settings.broker_url`` is set it also
publishes the id on the broker's Redis (channel ``gpulab-news:<db>``), and each API process runs one
``relay`` (started by the app's lifespan) that hands what arrives there to its own subscriptions, so a
verdict written by a Celery worker on another machine wakes the learner's stream at once. The relay
reconnects with back-off when Redis goes away and, once back, wakes every local stream (news may have been
missed meanwhile). The embedded mode stays purely in process.
News is a hint only: the stream re-reads the database after waking and still polls at its own interval.
``begin_shutdown()`` (the server got SIGTERM) wakes every stream of this process and ``closing()`` tells
them to end cleanly, so browsers reconnect to a process that stays up instead of holding this one open.
Nothing is queued: a publication with no subscriber is dropped; a Redis that is down costs a log line.
``publish_after_commit(session, id)`` publishes once that session's transaction commits (a rollback drops it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from types import TracebackType
from typing import TYPE_CHECKING

from sqlalchemy import event
from sqlalchemy.orm import Session

if TYPE_CHECKING:
    import redis

log = logging.getLogger(__name__)
CHANNEL_PREFIX = "gpulab-news"
PUBLISH_TIMEOUT_S = 1.0  # a grading never waits longer than this on a Redis that is away
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.2, 5.0
LISTEN_POLL_S = 0.5  # how often the relay looks at its stop flag while Redis is quiet
OUTAGE_LOG_EVERY_S = 30.0

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


def _wake_local(submission_id: str | None) -> None:
    """Wake this process's streams of ``submission_id`` (every stream when None)."""
    with _lock:
        if submission_id is None:
            subscribers = [s for group in _subscribers.values() for s in group]
        else:
            subscribers = list(_subscribers.get(submission_id, ()))
    for subscription in subscribers:
        subscription._wake()


_closing = threading.Event()


def begin_shutdown() -> None:
    """Tell every live stream of this process to end now (the server is stopping); wake them all."""
    _closing.set()
    _wake_local(None)


def end_shutdown() -> None:
    """Forget an earlier shutdown (a new app started in this process: tests)."""
    _closing.clear()


def closing() -> bool:
    """Return whether this process is stopping: streams end so clients reconnect to a live process."""
    return _closing.is_set()


def publish(submission_id: str) -> None:
    """Wake every stream of ``submission_id``, here and (with a broker) in every API process; call after the commit."""
    _wake_local(submission_id)
    from app.settings import get_settings

    broker_url = get_settings().broker_url
    if broker_url:
        _publish_on_redis(broker_url, submission_id)


_PENDING = "gpulab.news.pending"


def publish_after_commit(session: Session, submission_id: str) -> None:
    """Publish ``submission_id``'s news once ``session`` commits; a rollback drops it."""
    session.info.setdefault(_PENDING, set()).add(submission_id)


@event.listens_for(Session, "after_commit")
def _publish_pending(session: Session) -> None:
    for submission_id in sorted(session.info.pop(_PENDING, ())):
        publish(submission_id)


@event.listens_for(Session, "after_rollback")
def _drop_pending(session: Session) -> None:
    session.info.pop(_PENDING, None)


def subscriber_count(submission_id: str) -> int:
    """Return how many streams listen to ``submission_id`` here (for tests and diagnostics)."""
    with _lock:
        return len(_subscribers.get(submission_id, ()))


# --- across processes: Redis pub/sub -------------------------------------------------------------------------


def channel_for(redis_url: str) -> str:
    """Return the news channel of ``redis_url``: pub/sub ignores database numbers, so the name carries it."""
    from redis.connection import parse_url

    return f"{CHANNEL_PREFIX}:{parse_url(redis_url).get('db', 0)}"


_publishers: dict[str, redis.Redis] = {}
_last_outage_log = 0.0


def _publisher(redis_url: str) -> redis.Redis:
    import redis

    with _lock:
        client = _publishers.get(redis_url)
        if client is None:
            client = _publishers[redis_url] = redis.Redis.from_url(
                redis_url, socket_timeout=PUBLISH_TIMEOUT_S, socket_connect_timeout=PUBLISH_TIMEOUT_S
            )
        return client


def _log_outage(what: str, exc: Exception) -> None:
    """Log a Redis outage at most every ``OUTAGE_LOG_EVERY_S``: during one, every grading would say it."""
    global _last_outage_log
    now = time.monotonic()
    if now - _last_outage_log >= OUTAGE_LOG_EVERY_S:
        _last_outage_log = now
        log.warning("live news: %s failed (%s); streams fall back to polling", what, exc)


def _publish_on_redis(redis_url: str, submission_id: str) -> None:
    import redis

    try:
        _publisher(redis_url).publish(channel_for(redis_url), submission_id)
    except redis.RedisError as exc:
        _log_outage("publishing on Redis", exc)


class _Relay:
    """A daemon thread subscribed to the news channel, waking local subscriptions on every message."""

    def __init__(self, redis_url: str) -> None:
        self.redis_url = redis_url
        self.channel = channel_for(redis_url)
        self.users = 0
        self.subscribed = threading.Event()  # set while the subscription is live (tests wait on it)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpulab-news-relay", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 2 * LISTEN_POLL_S) -> None:
        self._stop.set()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        import redis

        delay_s, missed = BACKOFF_MIN_S, False
        while not self._stop.is_set():
            client = redis.Redis.from_url(
                self.redis_url, socket_connect_timeout=2.0, socket_keepalive=True, health_check_interval=15
            )
            pubsub = client.pubsub()
            try:
                pubsub.subscribe(self.channel)
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=LISTEN_POLL_S)
                    if message is None:
                        continue
                    if message["type"] == "subscribe":
                        self.subscribed.set()
                        delay_s = BACKOFF_MIN_S
                        if missed:  # whatever changed while we were away is news to every stream
                            _wake_local(None)
                            missed = False
                    elif message["type"] == "message":
                        data = message["data"]
                        _wake_local(data.decode() if isinstance(data, bytes) else str(data))
            except Exception as exc:  # Redis away, or anything else: the relay must outlive it and retry
                self.subscribed.clear()
                missed = True
                if isinstance(exc, redis.RedisError | OSError):
                    _log_outage("listening on Redis", exc)
                else:
                    log.exception("live news: the relay failed; retrying")
                self._stop.wait(delay_s)
                delay_s = min(2 * delay_s, BACKOFF_MAX_S)
            finally:
                with contextlib.suppress(redis.RedisError, OSError):
                    pubsub.close()
                client.close()
        self.subscribed.clear()


_relays: dict[str, _Relay] = {}


def relay(redis_url: str) -> _Relay | None:
    """Start (or join) this process's one relay of news from ``redis_url``; None when there is no broker.

    Pair every call with ``stop_relay``; the thread stops when the last user does.
    """
    if not redis_url:
        return None
    with _lock:
        found = _relays.get(redis_url)
        if found is None:
            found = _relays[redis_url] = _Relay(redis_url)
            found.start()
        found.users += 1
        return found


def stop_relay(handle: _Relay | None) -> None:
    """Leave the relay ``relay`` returned; stop its thread if nobody else uses it."""
    if handle is None:
        return
    with _lock:
        handle.users -= 1
        last = handle.users <= 0
        if last and _relays.get(handle.redis_url) is handle:
            del _relays[handle.redis_url]
    if last:
        handle.stop()
