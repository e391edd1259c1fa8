"""Timed assessments: each learner's clock, the rules that hold while it runs, and what happens at its end.

Contract:
- An assignment with ``time_limit_min`` is timed. A learner's ``TimedAttempt`` starts when they start it (inside
  the window, with the access code and from an allowed network when the assignment asks for them:
  ``coursework.start_timed``), and its end is fixed then: ``end_of`` = the start plus the limit times the
  accommodation's multiplier plus its extra minutes, and never later than the learner's close (their late end, else
  their due date). The server's clock decides everything; pages count down from the seconds the server gives them.
- ``refusal`` says why a timed assignment's work is refused now (not started, time over, a network outside the
  list), or None; ``assignments.gate`` asks it, so submissions, notebooks, tokens, the command line, example runs
  and drafts all meet the same rule.
- ``exam_of`` is the exam-mode attempt running for a learner now: while it runs, ``lockout`` refuses everything of
  gpulab's learner side that is not that assignment (practice, the catalogue, other assignments).
- ``due_for_close`` lists attempts whose end has passed and were not closed yet; ``coursework.close_timed`` closes
  each once (the sweeper of every grading process calls it): with ``submit_on_expiry`` the learner's drafts are
  submitted as final attempts, otherwise they are kept for staff (``staff_may_read_drafts``).
- ``in_networks`` checks a client address against an assignment's CIDR list (``ipaddress``).
Functions take the session keyword-only, only read, and leave the commit to the caller.
"""

from __future__ import annotations

import ipaddress
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.models import Assignment, Extension, TimedAttempt, User
from app.domain.platform.clock import as_utc
from worker.core import humane
from worker.core.errors import Forbidden, InvalidInput

MAX_LIMIT_MIN = 7 * 24 * 60
MAX_MULTIPLIER = 10.0


def is_timed(assignment: Assignment) -> bool:
    return assignment.time_limit_min is not None


def limit_for(assignment: Assignment, extension: Extension | None) -> timedelta:
    """Return ``extension``'s learner's time on ``assignment``: the limit times the multiplier, plus extra minutes."""
    minutes = float(assignment.time_limit_min or 0)
    if extension is not None:
        minutes = minutes * (extension.time_multiplier or 1.0) + (extension.extra_minutes or 0)
    return timedelta(minutes=minutes)


def end_of(started_at: datetime, limit: timedelta, close_at: datetime | None) -> datetime:
    """Return when a clock started at ``started_at`` ends: after ``limit``, never after ``close_at``."""
    end = as_utc(started_at) + limit
    return min(end, as_utc(close_at)) if close_at is not None else end


def attempt_of(*, session: Session, assignment: Assignment, user: User) -> TimedAttempt | None:
    return session.scalar(
        select(TimedAttempt).where(TimedAttempt.assignment_id == assignment.id, TimedAttempt.user_id == user.id)
    )


def parse_networks(text: str) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Return the CIDR networks of ``text`` (space- or comma-separated), or raise ``InvalidInput`` naming one."""
    found = []
    for word in text.replace(",", " ").split():
        try:
            found.append(ipaddress.ip_network(word, strict=False))
        except ValueError:
            raise InvalidInput(
                f"{word!r} is not a network: give CIDR blocks such as 10.1.2.0/24 or 2001:db8::/48"
            ) from None
    return found


def in_networks(assignment: Assignment, client_ip: str | None) -> bool:
    """Say whether ``client_ip`` may work on ``assignment`` (always, when it names no networks)."""
    networks = parse_networks(assignment.allowed_networks or "")
    if not networks:
        return True
    try:
        address = ipaddress.ip_address(client_ip or "")
    except ValueError:
        return False
    return any(address in network for network in networks)


def refusal(
    *, session: Session, assignment: Assignment, user: User, now: datetime, client_ip: str | None = None
) -> str | None:
    """Return why ``user`` may not work on timed ``assignment`` at ``now`` (None: they may, or it is not timed).

    ``client_ip``: the request's address, checked against the assignment's networks (None: not a request, e.g.
    the page's gate sentence, which the request that acts is checked again for).
    """
    if not is_timed(assignment):
        return None
    attempt = attempt_of(session=session, assignment=assignment, user=user)
    if attempt is None:
        return f"a timed assignment ({assignment.time_limit_min} minutes): start it on its page first"
    if as_utc(now) >= as_utc(attempt.ends_at):
        return f"your time ended on {humane.utc_text(attempt.ends_at)}"
    if client_ip is not None and not in_networks(assignment, client_ip):
        return "this assignment can be worked on only from the exam room's network"
    return None


def exam_of(*, session: Session, user: User, now: datetime) -> TimedAttempt | None:
    """Return ``user``'s running attempt at an exam-mode assignment, if any (the newest)."""
    return session.scalar(
        select(TimedAttempt)
        .join(Assignment, Assignment.id == TimedAttempt.assignment_id)
        .where(TimedAttempt.user_id == user.id, TimedAttempt.ends_at > as_utc(now), Assignment.exam_mode.is_(True))
        .order_by(TimedAttempt.started_at.desc())
        .limit(1)
    )


def lockout(*, session: Session, user: User, assignment_id: int | None, now: datetime) -> None:
    """Raise ``Forbidden`` when ``user`` is in an exam and ``assignment_id`` (None: practice) is not that exam."""
    exam = exam_of(session=session, user=user, now=now)
    if exam is not None and exam.assignment_id != assignment_id:
        assignment = session.get(Assignment, exam.assignment_id)
        title = assignment.title if assignment is not None else "an exam"
        raise Forbidden(
            f"you are in the exam {title!r} until {humane.utc_text(exam.ends_at)}: the rest of gpulab is closed to "
            "you until it ends"
        )


def due_for_close(*, session: Session, now: datetime, limit: int = 200) -> list[int]:
    """Return the ids of attempts whose end has passed and that were not closed yet, oldest end first."""
    return list(
        session.scalars(
            select(TimedAttempt.id)
            .where(TimedAttempt.closed_at.is_(None), TimedAttempt.ends_at <= as_utc(now))
            .order_by(TimedAttempt.ends_at)
            .limit(limit)
        )
    )


def staff_may_read_drafts(*, attempt: TimedAttempt | None, now: datetime) -> bool:
    """Say whether staff may read the learner's drafts of a timed assignment: once their time has ended."""
    return attempt is not None and as_utc(now) >= as_utc(attempt.ends_at)


def remaining_s(attempt: TimedAttempt, now: datetime) -> float:
    """Return the seconds left on ``attempt`` at ``now`` (0 once over)."""
    return max(0.0, (as_utc(attempt.ends_at) - as_utc(now)).total_seconds())
