"""``app.domain.platform.ratelimit``: moving windows in memory and on real Redis, shared by limiters, soft when Redis
is away."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from app.domain.platform import ratelimit
from app.domain.platform.ratelimit import Limiter, Rule, limiter_for, make_limiter
from app.settings import Settings
from tests.redis_server import PrivateRedis
from tests.support import free_port, require_service

REDIS_DB13 = "redis://127.0.0.1:6379/13"


def _key() -> str:
    return uuid.uuid4().hex  # every test counts its own keys, so a shared Redis needs no flushing


def _exercise_window(limiter: Limiter) -> None:
    rule, key = Rule("test", 2, 2), _key()
    assert limiter.allowed(rule, key)
    assert limiter.hit(rule, key) and limiter.hit(rule, key)
    assert not limiter.allowed(rule, key)
    assert not limiter.hit(rule, key), "a used-up key takes no more hits"
    assert limiter.retry_after_s(rule, key) == 2
    assert limiter.allowed(rule, _key()), "keys are counted apart"
    time.sleep(2.1)
    assert limiter.allowed(rule, key), "the window moved on"
    limiter.hit(rule, key)
    limiter.clear(rule, key)
    assert limiter.hit(rule, key) and limiter.hit(rule, key), "clear forgot every hit"


def test_memory_window_counts_refuses_and_moves_on() -> None:
    limiter = make_limiter("")
    assert not limiter.is_shared
    _exercise_window(limiter)


def test_a_zero_rule_refuses_at_once_with_the_whole_window() -> None:
    limiter, rule = make_limiter(""), Rule("none", 0, 60)
    assert not limiter.allowed(rule, "u") and not limiter.hit(rule, "u")
    assert limiter.retry_after_s(rule, "u") == 60


def test_settings_choose_the_storage() -> None:
    assert not limiter_for(Settings(mode="dev")).is_shared
    assert limiter_for(Settings(mode="dev", broker_url=REDIS_DB13)).is_shared


@pytest.mark.redis
class TestOnRedis:
    @pytest.fixture(autouse=True)
    def _redis(self) -> None:
        require_service("Redis", "127.0.0.1", 6379)

    def test_window_on_redis(self) -> None:
        _exercise_window(make_limiter(REDIS_DB13))

    def test_two_limiters_on_one_redis_share_their_counts(self) -> None:
        first, second, rule, key = make_limiter(REDIS_DB13), make_limiter(REDIS_DB13), Rule("shared", 3, 60), _key()
        assert first.hit(rule, key) and second.hit(rule, key) and first.hit(rule, key)
        assert not second.allowed(rule, key), "the second limiter saw the first one's hits"
        assert 58 <= second.retry_after_s(rule, key) <= 60
        keys = redis.Redis.from_url(REDIS_DB13).keys(f"{ratelimit.KEY_PREFIX}:*{key}*")
        assert len(keys) == 1, "counted once, under gpulab's prefix, in the broker's database"


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_redis_down_counts_in_memory_instead_of_failing(monkeypatch: pytest.MonkeyPatch) -> None:
    nobody = f"redis://127.0.0.1:{free_port()}/13"  # nothing listens there
    limiter, rule, key = make_limiter(nobody), Rule("down", 2, 60), _key()
    started = time.monotonic()
    assert limiter.hit(rule, key) and limiter.hit(rule, key)  # no exception: a login would not become a 500
    assert not limiter.allowed(rule, key), "still limited, by this process's own window"
    assert limiter.retry_after_s(rule, key) >= 59
    assert time.monotonic() - started < 2.0, "an unreachable Redis must not stall every call"


def test_limiter_falls_back_during_an_outage_and_shares_again_after_it(
    private_redis: PrivateRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ratelimit, "OUTAGE_RETRY_S", 0.3)
    url = private_redis.url(13)
    first, second, rule = make_limiter(url), make_limiter(url), Rule("outage", 2, 60)
    before = _key()
    first.hit(rule, before)
    first.hit(rule, before)
    assert not second.allowed(rule, before), "shared while Redis is up"

    private_redis.stop()
    during = _key()
    assert first.hit(rule, during) and first.hit(rule, during)
    assert not first.allowed(rule, during), "the fallback still limits"
    assert second.allowed(rule, during), "... per process: the other limiter did not see those hits"

    private_redis.start()  # empty again: this Redis keeps nothing across restarts
    time.sleep(0.4)  # past OUTAGE_RETRY_S: the next call tries Redis again
    after = _key()
    first.hit(rule, after)
    first.hit(rule, after)
    assert not second.allowed(rule, after), "shared again once Redis is back"
