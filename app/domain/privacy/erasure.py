"""Erase a person: remove their personal data, keep the numbers others' pages are built on.

Contract: ``erase(session=..., person=..., actor=..., code_policy=...)`` (admins only; never oneself):
- the account row stays (others' gradebooks, boards, similarity results and insights keep their rows), renamed
  "erased user" with the address ``erased-<id>@erased.invalid``, disabled, with an unusable password (which also
  ends every session: a session is bound to the password's fingerprint) and ``erased_at`` set;
- removed: their API tokens, LMS accounts (``LtiUser``: the ids launches carried) and unsent LMS scores, drafts,
  regrade requests with their messages, the text of messages they wrote in others' requests, the reasons of
  extensions and overrides given to them (numbers and dates stay), the address timed attempts started from;
- ``code_policy`` ``delete`` (the site default, ``Settings.erasure_code``): their submissions' code, output and
  messages, earlier gradings' messages and staff grades' comments are emptied; scores, verdicts, tests' outcomes
  and measurements stay as numbers. ``pseudonymize``: the code stays, under the erased account;
- an audit entry (``person.erase``) records who erased whom (by id) and which policy applied. Audit entries
  hold no personal data, so every one stays.
The caller commits. Again on an erased person: ``Conflict``.
"""

from __future__ import annotations

import secrets
from typing import Literal

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from app.domain.accounts.passwords import hash_password
from app.domain.audit import trail
from app.domain.audit.trail import Action
from app.domain.models import (
    ApiToken,
    Draft,
    Extension,
    GradeOverride,
    GradingRecord,
    LtiScoreOutbox,
    LtiUser,
    ManualGrade,
    RegradeMessage,
    RegradeRequest,
    Role,
    Submission,
    TestResult,
    TimedAttempt,
    User,
    utcnow,
)
from worker.core.errors import Conflict, Forbidden, InvalidInput

CodePolicy = Literal["delete", "pseudonymize"]
ERASED_NAME = "erased user"
ERASED_TEXT = "(erased)"


def erased_email(user_id: int) -> str:
    """Return the address an erased account gets (``.invalid``: no mail can ever reach it)."""
    return f"erased-{user_id}@erased.invalid"


def erase(*, session: Session, person: User, actor: User, code_policy: CodePolicy) -> None:
    """Remove ``person``'s personal data (see the module contract)."""
    if actor.role is not Role.admin:
        raise Forbidden("only an admin can erase a person")
    if actor.id == person.id:
        raise InvalidInput("you cannot erase your own account: ask another admin")
    if person.erased_at is not None:
        raise Conflict("this person was erased already")
    if code_policy not in ("delete", "pseudonymize"):
        raise InvalidInput("the code policy is delete or pseudonymize")
    pid = person.id
    person.email, person.name = erased_email(pid), ERASED_NAME
    person.password_hash = hash_password(secrets.token_urlsafe(32))  # nobody knows it: every session ends too
    person.is_active, person.must_change_password, person.erased_at = False, False, utcnow()
    if person.role is not Role.learner:
        person.role = Role.learner
    for model in (ApiToken, LtiUser, LtiScoreOutbox, Draft, RegradeRequest):
        session.execute(delete(model).where(model.user_id == pid))
    session.execute(update(RegradeMessage).where(RegradeMessage.author_id == pid).values(body=ERASED_TEXT))
    session.execute(update(Extension).where(Extension.user_id == pid).values(reason=ERASED_TEXT))
    session.execute(update(GradeOverride).where(GradeOverride.user_id == pid).values(comment=ERASED_TEXT))
    session.execute(update(TimedAttempt).where(TimedAttempt.user_id == pid).values(started_from=""))
    theirs = select(Submission.id).where(Submission.user_id == pid)
    if code_policy == "delete":
        session.execute(
            update(Submission).where(Submission.user_id == pid).values(code="", stdout="", stderr="", message="")
        )
        session.execute(update(TestResult).where(TestResult.submission_id.in_(theirs)).values(details=""))
        session.execute(update(GradingRecord).where(GradingRecord.submission_id.in_(theirs)).values(message=""))
        session.execute(
            update(ManualGrade).where(ManualGrade.submission_id.in_(theirs)).values(comment="", line_comments=[])
        )
    trail.record(
        session=session, action=Action.person_erase, actor=actor, subject_id=pid, target=f"person {pid}",
        after={"code": code_policy},
    )  # fmt: skip
    session.flush()
