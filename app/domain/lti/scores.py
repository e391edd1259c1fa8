"""Assignment and Grade Services (AGS) scores: gpulab posts each learner's counted score to the platform's gradebook.

Contract:
- ``queue_score(session=..., submission=...)`` (and ``queue_learner_score`` for a gradebook cell changed without
  a submission: an override, its revert) is called by ``app.domain.results.settle`` only, in the same
  transaction as the result (the caller commits both, so a score is queued exactly when the result is stored).
  For every ``LtiLink`` of the submission's assignment (``Submission.assignment_id``) that has a line item URL
  and whose platform knows the learner (an ``LtiUser`` on that platform), it computes the learner's counted
  grade on the assignment (``assignments.assignment_pct``: ``scoreGiven`` out of ``scoreMaximum`` 100) and
  upserts the outbox row of (link, user): an unsent row gets the new payload (one pending row per pair is
  enough: the platform only needs the newest score; a partial unique index holds that when two gradings
  settle at once, and the newest row is read ``FOR UPDATE`` so a sweeper posting it is waited for, and a new
  row made once it is sent); otherwise a new row is added, unless the newest row sent
  already carried the same ``scoreGiven`` (the counted score did not change: nothing to post). Exercise links
  (a link to one exercise, no assignment) and practice submissions post nothing: there is no counted score.
  The payload is the IMS score: ``scoreGiven``, ``scoreMaximum``, ``activityProgress`` ``Completed``,
  ``gradingProgress`` ``FullyGraded``, ``userId`` (the platform's ``sub``), ``timestamp`` (ISO 8601, UTC).
- ``deliver_due(session=..., now=..., http=...)`` posts the due unsent rows (``next_attempt_at <= now``,
  oldest first, at most ``DELIVERY_BATCH``), claimed with ``FOR UPDATE SKIP LOCKED`` on PostgreSQL so the
  sweepers of several workers never post one row twice at once. Per platform it gets an access token for the
  score scope from ``app.domain.lti.tokens`` (the client-credentials grant with a JWT client assertion signed
  by gpulab's key, cached per process until shortly before it expires; a 401 from the scores endpoint drops
  it). The score is posted as ``application/vnd.ims.lis.v1.score+json`` to
  ``{lineitem}/scores`` (``/scores`` goes before the line item URL's query string, which is kept). A 2xx marks
  the row sent (``sent_at``). Anything else adds one to ``attempts`` and keeps the reason in ``last_error``:
  - the scores endpoint refused this score for good (a 4xx other than ``RETRIED_STATUSES``: 401, whose token
    is dropped and asked for again, 408, 425 and 429; say 404 for a line item deleted in the platform, 400 or
    422 for a learner it no longer has, 403 for a scope the tool was not granted) gives the row up
    (``given_up_at``): the sweeper stops posting it, and retrying it after a fix there (``retry_now``) or a
    newer score of the pair (``queue_score``) makes it due again;
  - any other failure (a refused or unreachable token endpoint, an unreachable platform, a 5xx, the statuses
    above) postpones ``next_attempt_at`` by ``BACKOFF_BASE_S * 2**(attempts-1)``, at most ``BACKOFF_MAX_S``,
    and is retried however long the platform is down.
  Rows are never deleted: sent ones are the record of what the platform got, unsent ones wait (``outbox``
  lists them for staff: all for admins, one course's for its gradebook; ``unsent`` finds one, ``retry_now``
  makes it due at once). ``state_of(row)`` names where an unsent row stands: ``pending`` (never tried),
  ``retrying`` (tried, waits for ``next_attempt_at``), ``failed`` (given up). The caller commits; ``http`` is
  the ``httpx.Client`` to post with (its timeout).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import httpx
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.domain.courses import assignments
from app.domain.lti import tokens
from app.domain.models import (
    Assignment,
    LtiLink,
    LtiPlatform,
    LtiScoreOutbox,
    LtiUser,
    Submission,
    User,
    utcnow,
)
from worker.core.errors import InvalidInput, NotFound

SCORE_SCOPE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
SCORE_MEDIA_TYPE = "application/vnd.ims.lis.v1.score+json"
SCORE_MAXIMUM = 100.0
BACKOFF_BASE_S = 30
BACKOFF_MAX_S = 3600
DELIVERY_BATCH = 50
MAX_ERROR_CHARS = 500
RETRIED_STATUSES = frozenset({401, 408, 425, 429})  # 4xx that may pass later: the score is not given up

OutboxState = Literal["pending", "retrying", "failed"]


class _Refused(InvalidInput):
    """The scores endpoint refused this score for good (see the module contract)."""


@dataclass
class Delivery:
    """What one ``deliver_due`` did: the ids of the rows sent, of those that failed and wait, and of those given up."""

    sent: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    given_up: list[int] = field(default_factory=list)


def state_of(row: LtiScoreOutbox) -> OutboxState:
    """Return where the unsent ``row`` stands: never tried, tried and waiting, or given up."""
    if row.given_up_at is not None:
        return "failed"
    return "retrying" if row.attempts else "pending"


def _timestamp(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _payload(*, pct: float, sub: str, at: datetime) -> dict[str, Any]:
    return {
        "scoreGiven": round(min(SCORE_MAXIMUM, max(0.0, pct)), 4),
        "scoreMaximum": SCORE_MAXIMUM,
        "activityProgress": "Completed",
        "gradingProgress": "FullyGraded",
        "userId": sub,
        "timestamp": _timestamp(at),
    }


def queue_score(*, session: Session, submission: Submission) -> list[LtiScoreOutbox]:
    """Queue the learner's counted score for every platform link of the submission's assignment; return the rows."""
    if submission.assignment_id is None or submission.user_id is None:
        return []
    return queue_learner_score(session=session, assignment_id=submission.assignment_id, user_id=submission.user_id)


def queue_learner_score(*, session: Session, assignment_id: int, user_id: int) -> list[LtiScoreOutbox]:
    """Queue ``user_id``'s counted score on ``assignment_id`` for every platform link of it; return the rows."""
    found = session.execute(
        select(LtiLink, LtiUser.sub)
        .join(LtiUser, LtiUser.platform_id == LtiLink.platform_id)
        .where(
            LtiLink.assignment_id == assignment_id,
            LtiLink.lineitem_url.is_not(None),
            LtiUser.user_id == user_id,
        )
        .order_by(LtiLink.id)
    ).all()
    if not found:
        return []
    assignment = session.get(Assignment, assignment_id)
    user = session.get(User, user_id)
    if assignment is None or user is None or assignment.course.archived_at is not None:
        return []  # an archived course sends the LMS nothing more (its last scores were sent before)
    pct = assignments.assignment_pct(session=session, assignment=assignment, user=user)
    now = utcnow()
    queued: list[LtiScoreOutbox] = []
    for link, sub in found:
        payload = _payload(pct=pct, sub=sub, at=now)
        newest = _newest(session=session, link_id=link.id, user_id=user.id)
        if newest is not None and newest.sent_at is None:
            queued.append(_refresh(newest, payload=payload, link=link))
            continue
        if newest is not None and newest.payload.get("scoreGiven") == payload["scoreGiven"]:
            continue  # the platform has this score already
        row = LtiScoreOutbox(
            platform_id=link.platform_id,
            link_id=link.id,
            user_id=user.id,
            lineitem_url=str(link.lineitem_url),
            payload=payload,
            created_at=now,
            attempts=0,
            next_attempt_at=now,
        )
        try:
            with session.begin_nested():
                session.add(row)
        except IntegrityError:
            # Another grading of this learner queued a row first (the partial unique index allows one unsent
            # row per pair): carry the newer score in that one.
            pending = _newest(session=session, link_id=link.id, user_id=user.id)
            if pending is None or pending.sent_at is not None:
                raise
            row = _refresh(pending, payload=payload, link=link)
        queued.append(row)
    session.flush()
    return queued


def _newest(*, session: Session, link_id: int, user_id: int) -> LtiScoreOutbox | None:
    """Return the newest outbox row of the pair, locked: a sweeper posting it is waited for, then seen sent."""
    return session.scalar(
        select(LtiScoreOutbox)
        .where(LtiScoreOutbox.link_id == link_id, LtiScoreOutbox.user_id == user_id)
        .order_by(LtiScoreOutbox.id.desc())
        .limit(1)
        .with_for_update()
    )


def _refresh(row: LtiScoreOutbox, *, payload: dict[str, Any], link: LtiLink) -> LtiScoreOutbox:
    row.payload = payload  # a new dict: the JSON column notices assignment only
    row.lineitem_url = str(link.lineitem_url)
    if row.given_up_at is not None:  # a new score is worth one more try (the platform may take this one)
        retry_now(row)
    return row


def scores_url(lineitem_url: str) -> str:
    """Return the scores endpoint of a line item: ``/scores`` after its path, its query string kept."""
    parts = urlsplit(lineitem_url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + "/scores", parts.query, ""))


def access_token(*, session: Session, platform: LtiPlatform, http: httpx.Client) -> str:
    """Return an access token for the score scope (``tokens``: cached), or raise ``InvalidInput`` saying why not."""
    return tokens.access_token(session=session, platform=platform, http=http, scope=SCORE_SCOPE)


forget_tokens = tokens.forget_tokens  # drop every cached access token (the next delivery asks again)


def _post(*, session: Session, row: LtiScoreOutbox, platform: LtiPlatform, http: httpx.Client) -> None:
    """Post ``row``'s score, or raise ``InvalidInput`` saying why the platform did not take it."""
    token = access_token(session=session, platform=platform, http=http)
    url = scores_url(row.lineitem_url)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": SCORE_MEDIA_TYPE}
    try:
        response = http.post(url, json=row.payload, headers=headers)
    except httpx.HTTPError as exc:
        raise InvalidInput(f"could not reach {url}: {exc.__class__.__name__}: {exc}") from exc
    if response.status_code == 401:
        tokens.forget(platform=platform, scope=SCORE_SCOPE)
    if 400 <= response.status_code < 500 and response.status_code not in RETRIED_STATUSES:
        raise _Refused(f"{url} refused the score: HTTP {response.status_code}")
    if not 200 <= response.status_code < 300:
        raise InvalidInput(f"{url} answered HTTP {response.status_code}")


def backoff_s(attempts: int) -> int:
    """Return the wait after the ``attempts``-th failure: ``BACKOFF_BASE_S * 2**(attempts-1)``, capped."""
    return int(min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** max(0, min(attempts - 1, 20))))


def deliver_due(*, session: Session, now: datetime, http: httpx.Client) -> Delivery:
    """Post the due unsent scores; mark each sent or postpone it with back-off (the caller commits)."""
    rows = session.scalars(
        select(LtiScoreOutbox)
        .where(
            LtiScoreOutbox.sent_at.is_(None),
            LtiScoreOutbox.given_up_at.is_(None),
            LtiScoreOutbox.next_attempt_at <= now,
        )
        .order_by(LtiScoreOutbox.id)
        .limit(DELIVERY_BATCH)
        .with_for_update(skip_locked=True)
    ).all()
    delivery = Delivery()
    refused: dict[int, str] = {}  # platform id -> why its token was refused in this delivery
    for row in rows:
        platform = session.get(LtiPlatform, row.platform_id)
        try:
            if platform is None:
                raise InvalidInput("the platform is no longer registered")
            if platform.id in refused:
                raise InvalidInput(refused[platform.id])
            try:
                access_token(session=session, platform=platform, http=http)
            except InvalidInput as exc:
                refused[platform.id] = exc.message
                raise
            _post(session=session, row=row, platform=platform, http=http)
        except _Refused as exc:
            row.attempts += 1
            row.last_error = exc.message[:MAX_ERROR_CHARS]
            row.given_up_at = now
            delivery.given_up.append(row.id)
        except InvalidInput as exc:
            row.attempts += 1
            row.last_error = exc.message[:MAX_ERROR_CHARS]
            row.next_attempt_at = now + timedelta(seconds=backoff_s(row.attempts))
            delivery.failed.append(row.id)
        else:
            row.sent_at = now
            row.last_error = None
            delivery.sent.append(row.id)
    session.flush()
    return delivery


def unsent(*, session: Session, row_id: int) -> LtiScoreOutbox:
    """Return the unsent outbox row ``row_id``, or raise ``NotFound`` (unknown, or already taken)."""
    row = session.get(LtiScoreOutbox, row_id)
    if row is None or row.sent_at is not None:
        raise NotFound(f"no unsent score {row_id} in the outbox")
    return row


def retry_now(row: LtiScoreOutbox) -> None:
    """Make ``row`` due now, given up or not: the next sweeper pass posts it (its attempts and back-off stay)."""
    row.next_attempt_at = utcnow()
    row.given_up_at = None


def outbox(*, session: Session, limit: int = 200, course_id: int | None = None) -> list[LtiScoreOutbox]:
    """Return the unsent rows (of one course's assignments, if given), the ones waiting longest first."""
    stmt = select(LtiScoreOutbox).where(LtiScoreOutbox.sent_at.is_(None))
    if course_id is not None:
        stmt = (
            stmt.join(LtiLink, LtiLink.id == LtiScoreOutbox.link_id)
            .join(Assignment, Assignment.id == LtiLink.assignment_id)
            .where(Assignment.course_id == course_id)
        )
    stmt = stmt.order_by(LtiScoreOutbox.next_attempt_at, LtiScoreOutbox.id).limit(limit)
    return list(session.scalars(stmt))
