"""Regrade request pages: the list (``/regrade-requests``), one thread with its forms, and asking from an attempt.

Contract: any logged-in user; ``app.domain.review.regrade_requests`` (with ``app.domain.courses.policy``) decides who
sees and answers what (``RegradeRequestDep``: an outsider gets the 404 page). Forms carry the session's CSRF token and
answer with a redirect (POST-redirect-GET); refused input
comes back as the thread page with the error and the text kept (422 or 409), and writes nothing.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from fastapi.responses import Response
from sqlalchemy.orm import Session

from app.domain.models import RegradeRequest, User
from app.domain.review import regrade_requests as rr
from app.domain.submissions.lifecycle import get_for_user
from app.web.deps import CurrentUser, DispatcherDep, RegradeRequestDep, SessionDep, dispatch_committed
from app.web.errors import http_status
from app.web.pages import FORM_CSRF, flash, redirect, render
from worker.core.errors import GpulabError, InvalidInput, NotFound

router = APIRouter(include_in_schema=False, dependencies=[FORM_CSRF])
ACTIONS = [(a.value, label) for a, label in (
    (rr.StaffAction.comment, "Answer"), (rr.StaffAction.adjust, "Answer and set the item's score"),
    (rr.StaffAction.rerun, "Answer and re-run the auto-grader"), (rr.StaffAction.close, "Answer and close"),
)]  # fmt: skip


def _thread(
    request: Request, user: User, session: Session, found: RegradeRequest, *, error: str = "", body: str = "",
    status_code: int = 200,
) -> Response:  # fmt: skip
    return render(
        request, "regrade_requests/thread.html", status_code=status_code, user=user, r=found,
        staff=found.user_id != user.id and rr.can_answer(session=session, request=found, user=user),
        actions=ACTIONS, error=error, body=body,
    )  # fmt: skip


@router.get("/regrade-requests")
def list_page(request: Request, user: CurrentUser, session: SessionDep) -> Response:
    rows = rr.visible_to(session=session, user=user)
    return render(request, "regrade_requests/list.html", user=user, rows=rows)


@router.get("/regrade-requests/{request_id}")
def thread_page(request: Request, found: RegradeRequestDep, user: CurrentUser, session: SessionDep) -> Response:
    return _thread(request, user, session, found)


@router.post("/regrade-requests/{request_id}")
def write(
    request: Request,
    found: RegradeRequestDep,
    user: CurrentUser,
    session: SessionDep,
    dispatcher: DispatcherDep,
    body: Annotated[str, Form(max_length=rr.MAX_BODY_CHARS + 100)] = "",
    action: Annotated[str, Form(max_length=16)] = "",
    score_pct: Annotated[str, Form(max_length=32)] = "",
) -> Response:
    request_id = found.id
    try:
        chosen = rr.StaffAction(action) if action else None
        score = float(score_pct) if score_pct.strip() else None
    except ValueError:
        return _thread(request, user, session, found, error="choose an action from the list and give the score as a "
                       "number from 0 to 100", body=body, status_code=422)  # fmt: skip
    try:
        jobs = rr.write(session=session, request=found, user=user, body=body, action=chosen, score_pct=score)
        session.commit()
    except GpulabError as exc:
        session.rollback()
        found = rr.get_request(session=session, request_id=request_id, user=user)
        return _thread(request, user, session, found, error=exc.message, body=body, status_code=http_status(exc))
    for submission in jobs:
        dispatch_committed(dispatcher, submission)
    flash(request, DONE[chosen] if chosen is not None else "Your message is sent.")
    return redirect(f"/regrade-requests/{found.id}")


DONE = {
    rr.StaffAction.comment: "Your answer is sent to the learner.",
    rr.StaffAction.adjust: "Your answer is sent and the item's score is set: the learner and the grade book show it.",
    rr.StaffAction.rerun: "Your answer is sent and the attempt is being graded again; its history shows the result.",
    rr.StaffAction.close: "The request is closed; the learner sees your answer.",
    rr.StaffAction.reopen: "The request is open again: the learner may write.",
}  # what a staff answer did, as the flash says it


@router.post("/submissions/{submission_id}/regrade-request")
def ask(
    request: Request,
    submission_id: str,
    user: CurrentUser,
    session: SessionDep,
    reason: Annotated[str, Form(max_length=rr.MAX_BODY_CHARS + 100)] = "",
) -> Response:
    submission = get_for_user(session=session, submission_id=submission_id[:64], user=user)
    if submission is None or submission.user_id != user.id:
        raise NotFound(f"no submission {submission_id[:64]!r}")
    back = f"/exercises/{submission.exercise_version.exercise.slug}/history?attempt={submission.id}#regrade"
    try:
        found = rr.ask(session=session, user=user, submission=submission, reason=reason)
        session.commit()
    except (InvalidInput, GpulabError) as exc:
        session.rollback()
        flash(request, exc.message, "error")
        return redirect(back)
    flash(request, "Your regrade request is sent: staff answer here.")
    return redirect(f"/regrade-requests/{found.id}")
