"""``/admin/lti``: the admin page for LTI platforms, gpulab's keys and the score outbox.

Covers: only admins see it (others are sent to log in or refused), and the dashboard links it; it shows gpulab's
endpoints under the public URL; a registration form stores the platform (POST-redirect-GET with a flash), a
refused one is shown again with 422, the reason and the input kept, writing nothing; deployments are added and
removed; an unused platform is deleted, a used one is kept; rotate makes a new key and keeps the old one
published; the outbox lists what is owed (retrying with the attempt and its next try as a ``time`` element, or
failed with when it was given up) and "Retry now" makes it due; refused deployments are listed per platform with
Accept and Dismiss, and the "accept new deployments" switch flips. Every form posts the CSRF token: without it
the post is refused.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.lti import keys, platforms
from app.domain.models import LtiPlatform, LtiScoreOutbox, LtiToolKey, Role, User, utcnow
from app.settings import Settings
from tests.app.web.test_api_instructor import token
from tests.app.web.test_api_lti_admin import make_outbox_row, platform_body, platform_count

if TYPE_CHECKING:
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.postgres

PAGE = "/admin/lti"


def form_fields(**changes: str) -> dict[str, str]:
    fields = {key: value for key, value in platform_body().items() if key != "deployment_ids"}
    fields["deployment_ids"] = "1, 2"
    fields.update(changes)
    return fields


def flashes(page: str) -> list[str]:
    return [html.unescape(text) for text in re.findall(r'<p class="flash flash-\w+" role="\w+">([^<]*)</p>', page)]


def input_value(page: str, name: str) -> str:
    match = re.search(rf'<input id="[^"]+" name="{name}" [^>]*value="([^"]*)"', page)
    assert match, f"no input {name}"
    return html.unescape(match.group(1))


def test_only_admins_see_the_page_and_the_dashboard_links_it(
    client: TestClient, make_user: Callable[..., User], login: Callable[..., None], admin: User
) -> None:
    anonymous = client.get(PAGE, follow_redirects=False)
    assert anonymous.status_code == 303 and anonymous.headers["location"] == f"/login?next={PAGE}"
    login(client, make_user(Role.instructor))
    assert client.get(PAGE).status_code == 403
    login(client, admin)
    assert 'href="/admin/lti"' in client.get("/admin").text
    assert client.get(PAGE).status_code == 200


def test_the_page_shows_gpulabs_endpoints_under_the_public_url(
    admin_client: TestClient, app: Any, settings: Settings
) -> None:
    page = admin_client.get(PAGE).text
    for path in ("/lti/register", "/lti/login", "/lti/launch", "/lti/jwks"):
        assert f"<code>http://testserver{path}</code>" in page  # the address this request came to
    app.state.settings = settings.model_copy(update={"public_url": "https://gpulab.example.edu"})
    page = admin_client.get(PAGE).text
    assert "<code>https://gpulab.example.edu/lti/login</code>" in page
    assert "<code>https://gpulab.example.edu/lti/jwks</code>" in page
    assert "<code>gpulab.example.edu</code>" in page  # the tool domain
    assert "testserver/lti" not in page


def test_registering_by_form_stores_the_platform_and_redirects(admin_client: TestClient, db_session: Session) -> None:
    csrf = token(admin_client, PAGE)
    posted = admin_client.post(f"{PAGE}/platforms", data={"csrf_token": csrf, **form_fields()}, follow_redirects=False)
    assert posted.status_code == 303 and posted.headers["location"] == PAGE
    stored = platforms.find(session=db_session, issuer="https://moodle.example.edu", client_id="abc123")
    assert stored.deployment_ids == ["1", "2"] and stored.name == "Moodle" and stored.audience is None
    page = admin_client.get(PAGE).text
    assert any("Moodle (https://moodle.example.edu) is registered" in text for text in flashes(page))
    assert 'id="platform-' in page and "https://moodle.example.edu/mod/lti/certs.php" in page


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"jwks_url": "ftp://moodle.example.edu/certs"}, "JWKS URL"),
        ({"deployment_ids": "1 bad\x01id"}, "deployment id"),
    ],
)
def test_a_refused_form_is_shown_again_with_the_reason_and_the_input(
    admin_client: TestClient, db_session: Session, changes: dict[str, str], said: str
) -> None:
    fields = form_fields(name='Moodle "<prod>"', **changes)
    refused = admin_client.post(f"{PAGE}/platforms", data={"csrf_token": token(admin_client, PAGE), **fields})
    assert refused.status_code == 422
    error = re.search(r'id="register-error">([^<]*)</div>', refused.text)
    assert error and said in html.unescape(error.group(1))
    for name in ("issuer", "client_id", "name", "jwks_url", "deployment_ids"):
        assert input_value(refused.text, name) == fields[name]
    assert "&lt;prod&gt;" in refused.text and "<prod>" not in refused.text  # escaped, as typed
    assert platform_count(db_session) == 0


def test_a_duplicate_form_is_refused(admin_client: TestClient, db_session: Session, moodle: LtiPlatform) -> None:
    refused = admin_client.post(
        f"{PAGE}/platforms", data={"csrf_token": token(admin_client, PAGE), **form_fields(name="Again")}
    )
    assert refused.status_code == 422 and "registered already" in refused.text
    assert input_value(refused.text, "name") == "Again"
    assert platform_count(db_session) == 1


def test_a_post_without_the_csrf_token_is_refused(
    admin_client: TestClient, db_session: Session, moodle: LtiPlatform
) -> None:
    assert admin_client.post(f"{PAGE}/platforms", data=form_fields(client_id="x")).status_code == 403
    assert admin_client.post(f"{PAGE}/keys/rotate", data={}).status_code == 403
    assert admin_client.post(f"{PAGE}/platforms/{moodle.id}/delete", data={}).status_code == 403
    db_session.expire_all()
    assert platform_count(db_session) == 1
    assert db_session.scalar(select(LtiToolKey).where(LtiToolKey.retired_at.is_not(None))) is None


def test_adding_and_removing_deployments(admin_client: TestClient, db_session: Session, moodle: LtiPlatform) -> None:
    csrf = token(admin_client, PAGE)
    added = admin_client.post(
        f"{PAGE}/platforms/{moodle.id}/deployments", data={"csrf_token": csrf, "deployment_id": " 7 "},
        follow_redirects=False,
    )  # fmt: skip
    assert added.status_code == 303
    db_session.expire_all()
    assert db_session.get(LtiPlatform, moodle.id).deployment_ids == ["1", "7"]  # type: ignore[union-attr]
    assert "Moodle: deployment 7 is let in." in flashes(admin_client.get(PAGE).text)

    removed = admin_client.post(
        f"{PAGE}/platforms/{moodle.id}/deployments/remove", data={"csrf_token": csrf, "deployment_id": "1"}
    )
    assert removed.status_code == 200  # followed back to the page
    db_session.expire_all()
    assert db_session.get(LtiPlatform, moodle.id).deployment_ids == ["7"]  # type: ignore[union-attr]
    assert any("deployment 1 are refused" in text for text in flashes(removed.text))

    missing = admin_client.post(
        f"{PAGE}/platforms/{moodle.id}/deployments/remove", data={"csrf_token": csrf, "deployment_id": "1"}
    )
    assert any("has no deployment '1'" in text for text in flashes(missing.text))
    unknown = admin_client.post(f"{PAGE}/platforms/999999/deployments", data={"csrf_token": csrf, "deployment_id": "1"})
    assert unknown.status_code == 404


def test_an_unused_platform_is_deleted_and_a_used_one_is_kept(
    admin_client: TestClient, db_session: Session, moodle: LtiPlatform, learner: User
) -> None:
    spare = platforms.register(session=db_session, **platform_body(client_id="typo"))
    db_session.commit()
    make_outbox_row(db_session, moodle, learner)
    page = admin_client.get(PAGE).text
    assert f'action="/admin/lti/platforms/{spare.id}/delete"' in page
    assert f'action="/admin/lti/platforms/{moodle.id}/delete"' not in page  # in use: no button

    csrf = token(admin_client, PAGE)
    kept = admin_client.post(f"{PAGE}/platforms/{moodle.id}/delete", data={"csrf_token": csrf})
    assert any("would delete them" in text for text in flashes(kept.text))
    gone = admin_client.post(f"{PAGE}/platforms/{spare.id}/delete", data={"csrf_token": csrf})
    assert any("is deleted" in text for text in flashes(gone.text))
    db_session.expire_all()
    assert db_session.get(LtiPlatform, spare.id) is None and db_session.get(LtiPlatform, moodle.id) is not None


def test_rotate_makes_a_new_key_and_keeps_the_old_one_published(admin_client: TestClient, db_session: Session) -> None:
    page = admin_client.get(PAGE).text
    old = keys.current(session=db_session).kid
    assert old in page and "old one stays published for 3.0 days" in page
    rotated = admin_client.post(f"{PAGE}/keys/rotate", data={"csrf_token": token(admin_client, PAGE)})
    new = keys.current(session=db_session).kid
    assert new != old and f"New signing key {new}" in " ".join(flashes(rotated.text))
    key_row = r'<th scope="row" class="mono">([^<]+)</th>.*?<span class="badge[^"]*">(\w+)</span>'
    rows = re.findall(key_row, rotated.text, flags=re.S)
    assert rows == [(new, "signs"), (old, "published")]
    assert [key["kid"] for key in admin_client.get("/lti/jwks").json()["keys"]] == [new, old]


def test_the_outbox_lists_what_is_owed_and_retry_makes_it_due(
    admin_client: TestClient, db_session: Session, moodle: LtiPlatform, learner: User
) -> None:
    later = utcnow() + timedelta(hours=1)
    row = make_outbox_row(db_session, moodle, learner, attempts=2, next_attempt_at=later, last_error="HTTP 503 <x>")
    page = admin_client.get(PAGE).text
    shown = re.search(rf'<tr id="outbox-{row.id}">(.*?)</tr>', page, flags=re.S)
    assert shown, "the row is not listed"
    assert learner.email in shown.group(1) and "Moodle" in shown.group(1) and "HTTP 503 &lt;x&gt;" in shown.group(1)
    assert f'<time datetime="{later.isoformat()}" data-format="long">' in shown.group(1)
    state = re.search(r'<span class="badge">retrying</span> <span class="outbox-state">\(attempt 2 failed, next at '
                      r'<time datetime="([^"]+)" data-format="long">', shown.group(1))  # fmt: skip
    assert state and state.group(1) == later.isoformat() and "40/100" in shown.group(1)
    assert "failed</span>" not in shown.group(1)  # still retrying: not given up

    retried = admin_client.post(
        f"{PAGE}/outbox/{row.id}/retry", data={"csrf_token": token(admin_client, PAGE)}, follow_redirects=False
    )
    assert retried.status_code == 303 and retried.headers["location"] == PAGE
    db_session.expire_all()
    stored = db_session.get(LtiScoreOutbox, row.id)
    assert stored is not None and stored.next_attempt_at <= utcnow() < later and stored.attempts == 2
    assert f"Score {row.id} is due now" in " ".join(flashes(admin_client.get(PAGE).text))


def test_a_given_up_score_shows_failed_with_when_and_no_next_try(
    admin_client: TestClient, db_session: Session, moodle: LtiPlatform, learner: User
) -> None:
    given_up = utcnow() - timedelta(minutes=3)
    row = make_outbox_row(db_session, moodle, learner, attempts=1, given_up_at=given_up, last_error="HTTP 404")
    shown = re.search(rf'<tr id="outbox-{row.id}">(.*?)</tr>', admin_client.get(PAGE).text, flags=re.S)
    assert shown, "the row is not listed"
    assert '<span class="badge check-failed">failed</span>' in shown.group(1)
    assert f'given up <time datetime="{given_up.isoformat()}" data-format="long">' in shown.group(1)
    assert "none: given up" in shown.group(1) and "retrying" not in shown.group(1)
    admin_client.post(f"{PAGE}/outbox/{row.id}/retry", data={"csrf_token": token(admin_client, PAGE)})
    db_session.expire_all()
    assert db_session.get(LtiScoreOutbox, row.id).given_up_at is None  # type: ignore[union-attr]


def _refused_block(page: str, platform_id: int) -> str:
    start = page.index(f'id="refused-{platform_id}"')
    return page[start : page.index("</div>", start)]


def test_refused_deployments_are_shown_with_a_one_click_accept_and_a_dismiss(
    admin_client: TestClient, db_session: Session, moodle: LtiPlatform, make_user: Callable[..., User],
    login: Callable[..., None], admin: User,
) -> None:  # fmt: skip
    assert 'id="refused-' not in admin_client.get(PAGE).text
    for deployment in ("5", "6", "5"):
        platforms.note_refused(session=db_session, platform_id=moodle.id, deployment_id=deployment)
    db_session.commit()
    block = _refused_block(admin_client.get(PAGE).text, moodle.id)
    assert block.index('<span class="mono">5</span>') < block.index('<span class="mono">6</span>')  # newest first
    assert "2 launches refused" in block and "1 launch refused" in block and 'data-format="long"' in block
    assert block.count(f'action="/admin/lti/platforms/{moodle.id}/refused/accept"') == 2

    accept = f"{PAGE}/platforms/{moodle.id}/refused/accept"
    assert admin_client.post(accept, data={"deployment_id": "5"}).status_code == 403  # no CSRF token
    login(admin_client, make_user(Role.instructor))
    theirs = token(admin_client, "/instructor")  # a valid session and CSRF token, but no admin
    refused = admin_client.post(accept, data={"csrf_token": theirs, "deployment_id": "5"})
    assert refused.status_code == 403 and "admin" in refused.text
    db_session.expire_all()
    assert db_session.get(LtiPlatform, moodle.id).deployment_ids == ["1"]  # type: ignore[union-attr]

    login(admin_client, admin)
    csrf = token(admin_client, PAGE)
    accepted = admin_client.post(accept, data={"csrf_token": csrf, "deployment_id": "5"}, follow_redirects=False)
    assert accepted.status_code == 303 and accepted.headers["location"] == PAGE
    page = admin_client.get(PAGE).text
    assert "Moodle: deployment 5 is accepted: its launches are let in." in flashes(page)
    assert '<span class="mono">5</span>' not in _refused_block(page, moodle.id)
    db_session.expire_all()
    assert db_session.get(LtiPlatform, moodle.id).deployment_ids == ["1", "5"]  # type: ignore[union-attr]

    dismiss = f"{PAGE}/platforms/{moodle.id}/refused/dismiss"
    dismissed = admin_client.post(dismiss, data={"csrf_token": csrf, "deployment_id": "6"})
    assert any("deployment 6 is dismissed" in text for text in flashes(dismissed.text))
    assert 'id="refused-' not in dismissed.text
    again = admin_client.post(accept, data={"csrf_token": csrf, "deployment_id": "6"})
    assert any("has refused no deployment '6'" in text for text in flashes(again.text))
    db_session.expire_all()
    assert db_session.get(LtiPlatform, moodle.id).deployment_ids == ["1", "5"]  # type: ignore[union-attr]


def test_the_accept_new_deployments_switch(admin_client: TestClient, db_session: Session, moodle: LtiPlatform) -> None:
    switch = f"{PAGE}/platforms/{moodle.id}/accept-new-deployments"
    page = admin_client.get(PAGE).text
    assert f'action="{switch}"' in page and "Accept new deployments of this client" in page
    assert admin_client.post(switch, data={"accept": "true"}).status_code == 403  # no CSRF token
    db_session.expire_all()
    assert db_session.get(LtiPlatform, moodle.id).accept_new_deployments is False  # type: ignore[union-attr]

    csrf = token(admin_client, PAGE)
    on = admin_client.post(switch, data={"csrf_token": csrf, "accept": "true"})
    assert any("new deployments of client abc123 are let in" in text for text in flashes(on.text))
    assert "accepts new deployments</span>" in on.text and "Stop accepting new deployments" in on.text
    db_session.expire_all()
    assert db_session.get(LtiPlatform, moodle.id).accept_new_deployments is True  # type: ignore[union-attr]
    off = admin_client.post(switch, data={"csrf_token": csrf, "accept": "false"})
    assert any("are refused and listed for you to accept" in text for text in flashes(off.text))
    db_session.expire_all()
    assert db_session.get(LtiPlatform, moodle.id).accept_new_deployments is False  # type: ignore[union-attr]
