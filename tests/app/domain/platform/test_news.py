"""News of submission changes: a subscribed stream wakes on publish from any thread, and over Redis from any process."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from app.domain.platform import news
from tests.redis_server import PrivateRedis
from tests.support import child_env, configure, require_service, wait_for
from worker.core.config import REPO_ROOT


def test_publish_from_another_thread_wakes_the_subscriber() -> None:
    async def scenario() -> tuple[bool, float, int]:
        async with news.Subscription("sub-1") as subscription:
            count = news.subscriber_count("sub-1")
            timer = threading.Timer(0.05, news.publish, args=("sub-1",))
            started = time.monotonic()
            timer.start()
            woke = await subscription.wait(5.0)
            return woke, time.monotonic() - started, count

    woke, waited_s, count = asyncio.run(scenario())
    assert woke and count == 1
    assert waited_s < 2.0, "the subscriber slept through the news until its timeout"
    assert news.subscriber_count("sub-1") == 0, "leaving the block unsubscribes"


def test_news_of_another_submission_does_not_wake() -> None:
    async def scenario() -> bool:
        async with news.Subscription("sub-2") as subscription:
            news.publish("someone-else")
            return await subscription.wait(0.05)

    assert asyncio.run(scenario()) is False


def test_news_before_the_wait_is_not_lost_and_is_consumed() -> None:
    async def scenario() -> tuple[bool, bool]:
        async with news.Subscription("sub-3") as subscription:
            news.publish("sub-3")  # between the stream's database read and its wait
            await asyncio.sleep(0)
            return await subscription.wait(1.0), await subscription.wait(0.05)

    assert asyncio.run(scenario()) == (True, False)


def test_publish_without_subscribers_is_dropped() -> None:
    news.publish("nobody")
    assert news.subscriber_count("nobody") == 0


# --- across processes, over Redis ----------------------------------------------------------------------------


def _publish_from_another_process(broker_url: str, submission_id: str) -> None:
    """Publish as a Celery worker would: a separate interpreter, configured by GPULAB_* only."""
    code = f"from app.domain.platform import news; news.publish({submission_id!r})"
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=child_env(mode="dev", broker_url=broker_url),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


async def _woken_by(publisher: Callable[[], None], relay_url: str, submission_id: str) -> tuple[bool, float]:
    """Subscribe here through a relay on ``relay_url``, run ``publisher``; return whether news came, and how fast."""
    handle = news.relay(relay_url)
    assert handle is not None
    try:
        assert await asyncio.to_thread(handle.subscribed.wait, 10), "the relay never subscribed"
        async with news.Subscription(submission_id) as subscription:
            await asyncio.to_thread(publisher)
            started = time.monotonic()
            woke = await subscription.wait(5.0)
            return woke, time.monotonic() - started
    finally:
        news.stop_relay(handle)


@pytest.mark.redis
def test_publish_in_another_process_wakes_a_stream_here() -> None:
    require_service("Redis", "127.0.0.1", 6379)
    url, submission_id = "redis://127.0.0.1:6379/13", f"sub-{uuid.uuid4().hex}"
    woke, waited_s = asyncio.run(
        _woken_by(lambda: _publish_from_another_process(url, submission_id), url, submission_id)
    )
    assert woke and waited_s < 1.0, "the news crossed processes through Redis"


@pytest.mark.redis
def test_news_stays_within_its_broker_database() -> None:
    require_service("Redis", "127.0.0.1", 6379)
    assert news.channel_for("redis://127.0.0.1:6379/13") != news.channel_for("redis://127.0.0.1:6379/12")
    submission_id = f"sub-{uuid.uuid4().hex}"
    woke, _ = asyncio.run(
        _woken_by(
            lambda: news._publish_on_redis("redis://127.0.0.1:6379/12", submission_id),
            "redis://127.0.0.1:6379/13",
            submission_id,
        )
    )
    assert not woke, "another deployment's news (other database) must not reach this one"


def test_embedded_mode_publishes_in_process_only(monkeypatch: pytest.MonkeyPatch) -> None:
    configure(monkeypatch, mode="dev")
    called: list[str] = []
    monkeypatch.setattr(news, "_publish_on_redis", lambda url, sid: called.append(sid))
    news.publish("sub-embedded")
    assert called == [] and news.relay("") is None


def test_relay_reconnects_after_redis_restarts_and_wakes_every_stream(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(news, "BACKOFF_MAX_S", 0.5)
    server = PrivateRedis(tmp_path)
    server.start()
    url = server.url(13)
    handle = news.relay(url)
    assert handle is not None

    async def scenario() -> tuple[bool, bool, bool]:
        async with news.Subscription("sub-restart") as subscription:
            assert await asyncio.to_thread(handle.subscribed.wait, 10)
            server.stop()
            lost = await asyncio.to_thread(wait_for, lambda: not handle.subscribed.is_set(), timeout_s=10)
            server.start()
            # Back on: whatever changed meanwhile is news to every stream, unasked.
            woke_on_return = await subscription.wait(10.0)
            assert handle.subscribed.is_set()
            news._publish_on_redis(url, "sub-restart")
            woke_after = await subscription.wait(5.0)
            return bool(lost), woke_on_return, woke_after

    try:
        assert asyncio.run(scenario()) == (True, True, True)
    finally:
        news.stop_relay(handle)
        server.stop()
    assert not handle._thread.is_alive(), "stopping the last user stops the thread"
