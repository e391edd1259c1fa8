"""In-process news of submission changes: a subscribed stream wakes on publish from any thread."""

from __future__ import annotations

import asyncio
import threading
import time

from app import news


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
