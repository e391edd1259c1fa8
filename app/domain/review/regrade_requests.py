"""Regrade requests: a learner asks staff to look again at a graded item, and both sides see the thread.

Contract:
- An item is (learner, exercise, assignment or practice). A learner opens at most one request per item, ever
  (``ask``), about one of their own graded submissions, with a reason. Asking again means replying on the same
  request, which needs it not to be closed: once staff close it, only staff reopen it.
- Who may see a request: its learner, and the staff who may answer it: the instructors and TAs of the course it
  belongs to (its assignment's; for a practice submission, the practice course's staff list), and admins
  (``app.domain.courses.policy.may_grade``). Anyone else gets ``NotFound``: they learn nothing.
- Staff answer with a message and an action (``StaffAction``):
  - ``comment``: an answer; the request becomes ``answered``;
  - ``adjust``: a new score (0..100 % of the item) for an assignment's item, written as a gradebook override
    whose comment is the message. It lands through ``app.domain.results.settle.override`` (the learner's LMS
    score is queued), so the grade book and the LMS follow. Practice submissions count in no grade book:
    adjusting them is refused;
  - ``rerun``: the submission is graded again against the current version (``regrade.start_regrade``). The
    caller commits and then dispatches what ``respond`` returns. The new result queues the LTI score, as every
    grading does;
  - ``close`` (with the final answer) and ``reopen`` (the learner may write again).
  Every action is a message with its author and time, so the thread is the audit list.
- Learners ``reply`` on a request that is not closed, which makes it ``open`` again. ``write`` is either, by
  who writes (a learner who is also staff elsewhere still replies on their own request).
- Text: 1 to ``MAX_BODY_CHARS`` characters after trimming, no NUL. Functions take keyword-only arguments,
  flush, and never commit.
"""

from __future__ import annotations

import enum
import math

from sqlalchemy import case, or_, select
from sqlalchemy.orm import Session, selectinload

from app.domain.audit import trail
from app.domain.audit.trail import Action
from app.domain.courses import membership, policy
from app.domain.models import (
    Assignment,
    AssignmentItem,
    Course,
    RegradeMessage,
    RegradeRequest,
    RegradeRequestStatus,
    Submission,
    SubmissionStatus,
    User,
    utcnow,
)
from app.domain.results import settle
from app.domain.submissions.regrade import start_regrade
from worker.core.errors import Conflict, InvalidInput, NotFound

MAX_BODY_CHARS = 4000
MAX_ID = 2**31 - 1


class StaffAction(enum.StrEnum):
    comment = "comment"
    adjust = "adjust"
    rerun = "rerun"
    close = "close"
    reopen = "reopen"


def _text(body: str) -> str:
    text = body.strip()
    if not text:
        raise InvalidInput("write a message: it may not be empty")
    if len(text) > MAX_BODY_CHARS:
        raise InvalidInput(f"the message is longer than {MAX_BODY_CHARS} characters; shorten it")
    if "\x00" in text:
        raise InvalidInput("the message holds a NUL character, which is not text")
    return text


def _course_of(session: Session, request: RegradeRequest) -> Course | None:
    assignment = session.get(Assignment, request.assignment_id) if request.assignment_id is not None else None
    return assignment.course if assignment is not None else None


def _require_open(session: Session, assignment_id: int | None) -> None:
    assignment = session.get(Assignment, assignment_id) if assignment_id is not None else None
    if assignment is not None:
        membership.require_open(assignment.course)


def can_answer(*, session: Session, request: RegradeRequest, user: User) -> bool:
    """Say whether ``user`` is staff who may answer ``request`` (the staff of its course)."""
    return policy.may_grade(session=session, user=user, work=request)


def get_request(*, session: Session, request_id: int, user: User) -> RegradeRequest:
    """Return the request ``request_id`` if ``user`` is its learner or may answer it; else ``NotFound``."""
    found = session.get(RegradeRequest, request_id) if 0 < request_id <= MAX_ID else None
    if found is None or (found.user_id != user.id and not can_answer(session=session, request=found, user=user)):
        raise NotFound(f"no regrade request {request_id}")
    return found


def request_for_item(*, session: Session, user: User, submission: Submission) -> RegradeRequest | None:
    """Return ``user``'s request on the item of ``submission`` (same exercise and assignment), if any."""
    return session.scalar(
        select(RegradeRequest).where(
            RegradeRequest.user_id == user.id,
            RegradeRequest.exercise_id == submission.exercise_version.exercise_id,
            RegradeRequest.assignment_key == (submission.assignment_id or 0),
        )
    )


def _add(request: RegradeRequest, *, author: User, action: str, body: str, score_pct: float | None = None) -> None:
    request.messages.append(RegradeMessage(author_id=author.id, action=action, body=body, score_pct=score_pct))
    request.updated_at = utcnow()


def ask(*, session: Session, user: User, submission: Submission, reason: str) -> RegradeRequest:
    """Open ``user``'s regrade request on their graded ``submission``; ``Conflict`` if the item has one already."""
    if submission.user_id != user.id:
        raise NotFound(f"no submission {submission.id}")
    if submission.status is not SubmissionStatus.graded:
        raise InvalidInput("only a graded submission can be regraded; wait for its result")
    _require_open(session, submission.assignment_id)
    body = _text(reason)
    existing = request_for_item(session=session, user=user, submission=submission)
    if existing is not None:
        if existing.status is RegradeRequestStatus.closed:
            raise Conflict("you asked for a regrade of this item already and it is closed; staff may reopen it")
        raise Conflict("you have a regrade request on this item already: write in its thread instead")
    request = RegradeRequest(
        user_id=user.id, exercise_id=submission.exercise_version.exercise_id, assignment_id=submission.assignment_id,
        assignment_key=submission.assignment_id or 0, submission_id=submission.id,
    )  # fmt: skip
    _add(request, author=user, action="ask", body=body)
    session.add(request)
    session.flush()
    return request


def reply(*, session: Session, request: RegradeRequest, user: User, body: str) -> RegradeRequest:
    """Add the learner's message to their request (not closed); it waits for staff again."""
    if request.user_id != user.id:
        raise NotFound(f"no regrade request {request.id}")
    if request.status is RegradeRequestStatus.closed:
        raise Conflict("this regrade request is closed; staff may reopen it")
    _require_open(session, request.assignment_id)
    _add(request, author=user, action="reply", body=_text(body))
    request.status = RegradeRequestStatus.open
    session.flush()
    return request


def _item(session: Session, request: RegradeRequest) -> AssignmentItem:
    item = session.scalar(
        select(AssignmentItem).where(
            AssignmentItem.assignment_id == request.assignment_id, AssignmentItem.exercise_id == request.exercise_id
        )
    )
    if item is None:
        raise InvalidInput("the exercise is no longer an item of the assignment, so there is no score to adjust")
    return item


def respond(
    *,
    session: Session,
    request: RegradeRequest,
    user: User,
    action: StaffAction,
    body: str,
    score_pct: float | None = None,
) -> list[Submission]:
    """Answer ``request`` as staff with ``action``; return the submissions to dispatch once committed."""
    if not can_answer(session=session, request=request, user=user):
        raise NotFound(f"no regrade request {request.id}")
    text = _text(body)
    _require_open(session, request.assignment_id)
    status_was = request.status
    closed = request.status is RegradeRequestStatus.closed
    if closed and action is not StaffAction.reopen:
        raise Conflict("this regrade request is closed; reopen it first")
    if not closed and action is StaffAction.reopen:
        raise Conflict("this regrade request is not closed, so there is nothing to reopen")
    dispatch: list[Submission] = []
    if action is StaffAction.adjust:
        if request.assignment_id is None:
            raise InvalidInput("a practice submission counts in no grade book: re-run it, or answer without a score")
        if score_pct is None or not math.isfinite(score_pct) or not 0 <= score_pct <= 100:
            raise InvalidInput("give the new score as a percentage from 0 to 100")
        course = _course_of(session, request)
        assert course is not None  # an assignment has a course
        settle.override(
            session=session, course=course, item=_item(session, request), learner=request.user,
            score_pct=score_pct, comment=f"Regrade request {request.id}: {text}", actor=user,
        )  # fmt: skip
    elif action is StaffAction.rerun:
        exercise = request.exercise
        if exercise.current_version is None:
            raise InvalidInput("the exercise has no version to grade against")
        start_regrade(session=session, exercise=exercise, target=exercise.current_version,
                      submissions=[request.submission], user=user)  # fmt: skip
        dispatch = [request.submission]
    adjusted = score_pct if action is StaffAction.adjust else None
    _add(request, author=user, action=action.value, body=text, score_pct=adjusted)
    request.status = {
        StaffAction.close: RegradeRequestStatus.closed,
        StaffAction.reopen: RegradeRequestStatus.open,
    }.get(action, RegradeRequestStatus.answered)
    session.flush()
    if action is not StaffAction.comment:
        course = _course_of(session, request)
        trail.record(
            session=session, action=Action.regrade_decision, actor=user, course_id=course.id if course else None,
            subject_id=request.user_id, target=f"regrade request {request.id} (submission {request.submission_id})",
            before={"status": status_was},
            after={"decision": action.value, "status": request.status, "score_pct": adjusted},
        )  # fmt: skip
    return dispatch


def write(
    *,
    session: Session,
    request: RegradeRequest,
    user: User,
    body: str,
    action: StaffAction | None = None,
    score_pct: float | None = None,
) -> list[Submission]:
    """Add ``user``'s message: staff answer with ``action`` (a comment by default), the learner replies."""
    if request.user_id != user.id and can_answer(session=session, request=request, user=user):
        return respond(session=session, request=request, user=user, action=action or StaffAction.comment, body=body,
                       score_pct=score_pct)  # fmt: skip
    if action is not None:
        raise InvalidInput("only staff answer with an action; leave it out to reply")
    reply(session=session, request=request, user=user, body=body)
    return []


def visible_to(*, session: Session, user: User, limit: int = 200) -> list[RegradeRequest]:
    """Return the requests ``user`` may see: their own, and those they may answer; waiting ones first, then newest."""
    stmt = select(RegradeRequest).options(
        selectinload(RegradeRequest.messages), selectinload(RegradeRequest.user), selectinload(RegradeRequest.exercise)
    )
    scope = policy.staff_courses(session=session, user=user)
    stmt = stmt.where(or_(RegradeRequest.user_id == user.id, scope.over(RegradeRequest.assignment_id)))
    # Waiting first in the query itself: sorting after the limit could drop an old open request for a new closed one.
    waiting = case({RegradeRequestStatus.open: 0, RegradeRequestStatus.answered: 1}, value=RegradeRequest.status,
                   else_=2)  # fmt: skip
    return list(session.scalars(stmt.order_by(waiting, RegradeRequest.updated_at.desc()).limit(limit)))
