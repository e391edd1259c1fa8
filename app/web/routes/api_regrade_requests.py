"""``/api/regrade-requests`` and ``/api/submissions/{id}/regrade-request``: ask for a regrade, answer, see the thread.

Contract: any logged-in user; ``app.domain.review.regrade_requests`` (with ``app.domain.courses.policy``) decides who
may see and answer what (``RegradeRequestDep``: an outsider gets 404). Staff's ``rerun`` is dispatched after the
commit, as every grading is. JSON bodies, so the API's CSRF
rule covers them.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, Field

from app.domain.models import RegradeRequest
from app.domain.platform.clock import UtcDatetime
from app.domain.review import regrade_requests as rr
from app.web.deps import (
    CurrentUser,
    DispatcherDep,
    RegradeRequestDep,
    SessionDep,
    SubmissionDep,
    dispatch_committed,
)
from app.web.errors import problem_responses

router = APIRouter(tags=["regrade requests"])


class AskIn(BaseModel):
    reason: str = Field(min_length=1, max_length=rr.MAX_BODY_CHARS, description="why the grade should change")


class MessageIn(BaseModel):
    body: str = Field(min_length=1, max_length=rr.MAX_BODY_CHARS)
    action: rr.StaffAction | None = Field(
        default=None, description="staff only: what the answer does; learners leave it out (a reply)"
    )
    score_pct: float | None = Field(default=None, ge=0, le=100, description="adjust: the item's new score, 0..100")


class MessageOut(BaseModel):
    id: int
    author: str | None = Field(description="the author's e-mail (None once the account is deleted)")
    action: str = Field(description="ask, reply, comment, adjust, rerun, close or reopen")
    body: str
    score_pct: float | None
    created_at: UtcDatetime


class RegradeRequestOut(BaseModel):
    id: int
    status: str = Field(description="open (waiting for staff), answered, or closed")
    learner: str
    exercise: str
    assignment_id: int | None
    submission_id: str
    score: float | None
    max_score: float
    can_answer: bool = Field(description="whether the viewer is staff who may answer it")
    created_at: UtcDatetime
    updated_at: UtcDatetime
    messages: list[MessageOut]

    @classmethod
    def of(cls, request: RegradeRequest, *, can_answer: bool) -> RegradeRequestOut:
        sub = request.submission
        return cls(
            id=request.id, status=request.status.value, learner=request.user.email, exercise=request.exercise.slug,
            assignment_id=request.assignment_id, submission_id=request.submission_id, score=sub.score,
            max_score=sub.max_score, can_answer=can_answer, created_at=request.created_at,
            updated_at=request.updated_at,
            messages=[MessageOut(id=m.id, author=m.author.email if m.author else None, action=m.action, body=m.body,
                                 score_pct=m.score_pct, created_at=m.created_at) for m in request.messages],
        )  # fmt: skip


ASK_ERRORS = problem_responses(
    404, 409, 422, described={409: "the item has a regrade request already, or its course is archived"}
)
ANSWER_ERRORS = problem_responses(
    404,
    409,
    422,
    described={
        404: "no such request that you may see",
        409: "closed (or, to reopen, not closed), or its course is archived",
    },
)
GET_ERRORS = problem_responses(404, described={404: "no such request that you may see"})


@router.post("/api/submissions/{submission_id}/regrade-request", status_code=201, responses=ASK_ERRORS)
def ask(submission: SubmissionDep, body: AskIn, user: CurrentUser, session: SessionDep) -> RegradeRequestOut:
    """Ask staff to look again at my graded submission, saying why (once per item)."""
    request = rr.ask(session=session, user=user, submission=submission, reason=body.reason)
    session.commit()
    return RegradeRequestOut.of(request, can_answer=rr.can_answer(session=session, request=request, user=user))


@router.get("/api/regrade-requests")
def list_requests(user: CurrentUser, session: SessionDep) -> list[RegradeRequestOut]:
    """List the requests I may see: mine, and those I may answer; waiting ones first."""
    return [
        RegradeRequestOut.of(r, can_answer=rr.can_answer(session=session, request=r, user=user))
        for r in rr.visible_to(session=session, user=user)
    ]


@router.get("/api/regrade-requests/{request_id}", responses=GET_ERRORS)
def get_request(request: RegradeRequestDep, user: CurrentUser, session: SessionDep) -> RegradeRequestOut:
    """Return one request with its whole thread."""
    return RegradeRequestOut.of(request, can_answer=rr.can_answer(session=session, request=request, user=user))


@router.post("/api/regrade-requests/{request_id}/messages", responses=ANSWER_ERRORS)
def add_message(
    request: RegradeRequestDep, body: MessageIn, user: CurrentUser, session: SessionDep, dispatcher: DispatcherDep
) -> RegradeRequestOut:
    """Write in a request's thread: the learner replies; staff answer with an action (a comment by default)."""
    jobs = rr.write(session=session, request=request, user=user, body=body.body, action=body.action,
                    score_pct=body.score_pct)  # fmt: skip
    session.commit()
    for submission in jobs:
        dispatch_committed(dispatcher, submission)
    return RegradeRequestOut.of(request, can_answer=rr.can_answer(session=session, request=request, user=user))
