"""Password hashing, e-mail checking, the login limiter, the CSRF rule and prompt sanitising, without a database."""

from __future__ import annotations

import base64
import hashlib
import secrets
import threading
import time

import pytest
from pwdlib import PasswordHash

from app.domain.accounts.passwords import (
    LegacyScryptHasher,
    LoginLimiter,
    check_email,
    check_password,
    hash_password,
    normalise_email,
    verify_password,
)
from app.domain.platform.markdown import render_markdown
from app.web.sessions import csrf_problem
from worker.core.errors import InvalidInput, RateLimited


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def old_scrypt_hash(password: str, n: int = 2**14) -> str:
    """Hash ``password`` in the format gpulab stored before argon2 (``scrypt$n$r$p$salt$hash``)."""
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=n, r=8, p=1, dklen=32, maxmem=256 * n * 8 + 2**20)
    return f"scrypt${n}$8$1${_b64(salt)}${_b64(digest)}"


def test_password_hash_round_trip_and_salting() -> None:
    first, second = hash_password("correct horse"), hash_password("correct horse")
    assert first.startswith("$argon2id$")
    assert first != second  # a fresh salt each time
    assert verify_password("correct horse", first) and verify_password("correct horse", second)
    assert not verify_password("correct horsE", first)
    assert check_password("correct horse", first) == (True, None)  # current parameters: nothing to upgrade


def test_production_hashes_are_argon2id_at_the_library_defaults(production_passwords: PasswordHash) -> None:
    encoded = production_passwords.hash("correct horse")
    assert encoded.startswith("$argon2id$v=19$m=65536,t=3,p=4$")  # RFC 9106's low-memory profile
    assert production_passwords.verify("correct horse", encoded)


def test_old_scrypt_hashes_verify_and_ask_for_an_argon2_hash() -> None:
    old = old_scrypt_hash("correct horse")
    assert verify_password("correct horse", old)
    matches, new = check_password("correct horse", old)
    assert matches and new is not None and new.startswith("$argon2id$")
    assert verify_password("correct horse", new)
    assert check_password("correct horsE", old) == (False, None)  # no upgrade without the password


def test_argon2_hashes_of_other_cost_parameters_are_upgraded(production_passwords: PasswordHash) -> None:
    stronger = production_passwords.hash("correct horse")
    matches, new = check_password("correct horse", stronger)
    assert matches and new is not None and new != stronger and verify_password("correct horse", new)


def test_lone_surrogates_hash_instead_of_failing() -> None:
    password = "pass\ud800word"  # valid JSON, not encodable as plain UTF-8
    encoded = hash_password(password)
    assert verify_password(password, encoded) and not verify_password("pass\ud801word", encoded)


@pytest.mark.parametrize(
    "encoded",
    [
        "",
        "plain",
        "bcrypt$1$2$3$aaaa$bbbb",
        "scrypt$x$8$1$aaaa$bbbb",
        "scrypt$16384$8$1$not base64!$bbbb",
        "scrypt$1073741824$8$1$AAAAAAAAAAAAAAAAAAAAAA$" + "A" * 43,
        "$argon2id$v=19$m=1024,t=1,p=1$garbage",
        "$2b$12$" + "a" * 53,  # bcrypt: pwdlib knows it, gpulab does not accept it
    ],
)
def test_malformed_absurd_or_unknown_hashes_never_match(encoded: str) -> None:
    assert not verify_password("anything", encoded)
    assert check_password("anything", encoded) == (False, None)


def test_legacy_hasher_never_makes_new_hashes() -> None:
    with pytest.raises(NotImplementedError):
        LegacyScryptHasher().hash("correct horse")


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("learner@example.com", "learner@example.com"),
        ("  New@Example.COM ", "new@example.com"),
        ("a.b+tag@x.org", "a.b+tag@x.org"),
        ("a@b.c", "a@b.c"),
        ("ünï@bücher.de", "ünï@bücher.de"),
    ],
)
def test_check_email_accepts_and_normalises_like_before(given: str, stored: str) -> None:
    assert check_email(given) == stored == normalise_email(given)


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("", "An email address must have an @-sign"),
        ("@x.org", "There must be something before the @-sign"),
        ("plain", "An email address must have an @-sign"),
        ("a@b", "It should have a period"),
        ("a b@x.org", "The email address contains invalid characters before the @-sign"),
        ("a@@x.org", "The part after the @-sign contains invalid characters"),
        ("u@host.local", "special-use or reserved name"),
        ("u@school.test", "special-use or reserved name"),
        ("u@localhost", "It should have a period"),
        ("x" * 65 + "@x.org", "too long before the @-sign"),
        ("a@" + "x" * 330 + ".org", "longer than 320 characters"),
    ],
)
def test_check_email_refuses_with_a_reason(given: str, why: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        check_email(given)
    assert why in caught.value.message
    if len(given) <= 320:
        assert caught.value.message.startswith(f"{given.strip().lower()!r} is not a valid e-mail address: ")


def test_check_email_asks_no_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    import email_validator.deliverability

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("DNS was queried")

    monkeypatch.setattr(email_validator.deliverability, "validate_email_deliverability", refuse)
    assert check_email("someone@gmail.com") == "someone@gmail.com"


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
