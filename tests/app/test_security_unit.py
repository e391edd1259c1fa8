"""Password hashing, the login limiter, the CSRF rule and prompt sanitising, without a database."""

from __future__ import annotations

import threading
import time

import pytest

from app.domain.markdown import render_markdown
from app.domain.security import LoginLimiter, csrf_problem, hash_password, verify_password
from worker.core.errors import RateLimited


def test_password_hash_round_trip_and_salting() -> None:
    first, second = hash_password("correct horse"), hash_password("correct horse")
    assert first.startswith("scrypt$16384$8$1$") and len(first.split("$")) == 6
    assert first != second  # a fresh salt each time
    assert verify_password("correct horse", first) and verify_password("correct horse", second)
    assert not verify_password("correct horsE", first)


@pytest.mark.parametrize(
    "encoded",
    [
        "",
        "plain",
        "bcrypt$1$2$3$aaaa$bbbb",
        "scrypt$x$8$1$aaaa$bbbb",
        "scrypt$1073741824$8$1$AAAAAAAAAAAAAAAAAAAAAA$" + "A" * 43,
    ],
)
def test_malformed_or_absurd_hashes_never_match(encoded: str) -> None:
    assert not verify_password("anything", encoded)


def test_limiter_refuses_after_max_failures_until_the_window_passes() -> None:
    limiter = LoginLimiter(max_failures=3, window_s=2)
    for _ in range(3):
        limiter.check(email="A@x.org", ip="1.2.3.4")
        limiter.record_failure(email="a@x.org", ip="1.2.3.4")
    with pytest.raises(RateLimited) as caught:
        limiter.check(email=" a@X.org ", ip="9.9.9.9")  # same e-mail, normalised, from elsewhere
    assert caught.value.retry_after_s == 2
    assert "try again in 2 s" in caught.value.message
    with pytest.raises(RateLimited):
        limiter.check(email="b@x.org", ip="1.2.3.4")  # same IP, other e-mail
    limiter.check(email="b@x.org", ip="5.6.7.8")  # neither key used up
    time.sleep(2.1)
    limiter.check(email="a@x.org", ip="1.2.3.4")


def test_limiter_success_forgives_the_email_but_not_the_ip() -> None:
    limiter = LoginLimiter(max_failures=2, window_s=60)
    for _ in range(2):
        limiter.record_failure(email="a@x.org", ip="1.1.1.1")
    limiter.record_success(email="a@x.org")
    limiter.check(email="a@x.org", ip="2.2.2.2")
    with pytest.raises(RateLimited):
        limiter.check(email="c@x.org", ip="1.1.1.1")


def test_limiter_is_thread_safe() -> None:
    limiter = LoginLimiter(max_failures=4000, window_s=60)

    def hammer() -> None:
        for _ in range(500):
            limiter.record_failure(email="a@x.org", ip="1.1.1.1")

    threads = [threading.Thread(target=hammer) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    with pytest.raises(RateLimited):  # all 4000 failures counted: none lost to a race
        limiter.check(email="a@x.org", ip="2.2.2.2")


def _scope(method: str, path: str, **headers: str) -> dict[str, object]:
    return {
        "type": "http",
        "method": method,
        "path": path,
        "headers": [(k.replace("_", "-").encode(), v.encode()) for k, v in headers.items()],
    }


def test_csrf_rule() -> None:
    cookie = {"cookie": "gpulab_session=abc", "host": "gpulab.example"}
    assert csrf_problem(_scope("GET", "/api/exercises", **cookie)) is None
    assert csrf_problem(_scope("POST", "/api/x", host="h")) is None  # no cookie, no ambient authority
    assert csrf_problem(_scope("POST", "/api/x", content_type="application/json; charset=utf-8", **cookie)) is None
    assert "Content-Type: application/json" in str(csrf_problem(_scope("POST", "/api/x", **cookie)))
    assert csrf_problem(_scope("POST", "/api/x", content_type="text/plain", **cookie))
    assert csrf_problem(_scope("POST", "/api/auth/login", content_type="text/plain", host="h"))  # login CSRF
    same = {"content_type": "application/json", "origin": "https://gpulab.example", **cookie}
    assert csrf_problem(_scope("POST", "/api/x", **same)) is None
    assert "Origin" in str(csrf_problem(_scope("POST", "/api/x", **{**same, "origin": "https://evil.example"})))
    assert csrf_problem(_scope("POST", "/api/x", **{**same, "origin": "null"}))
    assert csrf_problem(_scope("POST", "/api/x", **{**same, "origin": "https://gpulab.example.evil.org"}))
    assert csrf_problem(_scope("DELETE", "/api/x", **{**same, "sec_fetch_site": "cross-site"}))
    assert csrf_problem(_scope("POST", "/not-api", **cookie)) is None


def test_markdown_keeps_formatting_and_drops_active_content() -> None:
    html = render_markdown(
        "# Title\n\nSome `code` and **bold**.\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n"
        "```python\nx = '<b>'\n```\n\n[ok](https://example.org) [bad](javascript:alert(1))\n\n"
        '<script>alert("x")</script><img src=x onerror="alert(1)"><a href="javascript:alert(2)" onclick="f()">c</a>\n'
        "<iframe src=https://evil.example></iframe><style>body{display:none}</style>\n"
    )
    assert "<h1>Title</h1>" in html and "<code>code</code>" in html and "<table>" in html
    assert "&lt;b&gt;" in html  # code stays text
    assert '<a href="https://example.org" rel="noopener noreferrer">ok</a>' in html
    lowered = html.lower()
    for forbidden in ("<script", 'alert("x")', "onerror", "onclick", 'href="javascript', "<iframe", "<style", "<img"):
        assert forbidden not in lowered, forbidden
