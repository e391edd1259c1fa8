"""``/api/submissions`` and ``/api/me``: a submission's result, its live status stream and diff, my list and progress.

Contract: learners see only their own submissions (others' are 404); staff see all. The detail, my list and
every event show of each test what its visibility tier lets the viewer see (``app.domain.courses.visibility``), read
anew at each event. A submission's diff is against its author's previous attempt on the same exercise
(``previous_id`` null and no lines for the first).
The events stream is ``text/event-stream``, framed by FastAPI (``fastapi.sse``): an ``event: status`` whose data
is the ``SubmissionOut`` JSON, sent first and then at every change of status or verdict (at once on news, see
``app.domain.platform.news``: from this process, and from every process when a broker is set; else within
``settings.events_poll_s``), a ``: keep-alive`` comment every ``KEEPALIVE_S`` without change (FastAPI adds its own
``: ping`` after 15 s of silence, which a poll shorter than 5 s never lets happen), and it ends after the first
graded/error event, when the client goes away, after ``MAX_STREAM_S``, or (with a ``CLOSING_COMMENT``) when the
server is stopping. Events carry no id: a client that reconnects gets the current status first, as on its first
connection.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.sse import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool

from app.domain.courses.visibility import shown_for, shown_tests
from app.domain.exercises.bank import list_published
from app.domain.models import Submission, User, utcnow
from app.domain.platform import news
from app.domain.submissions.lifecycle import list_for_user
from app.domain.submissions.progress import Progress, diff_lines, previous_attempt, progress_by_exercise
from app.web.deps import CurrentUser, SessionDep, SessionFactory, SessionFactoryDep, SubmissionDep
from app.web.routes.preload import with_current_versions, with_submission_details
from app.web.schemas.submissions import SETTLED, AttemptDiffOut, ProgressOut, SubmissionOut

KEEPALIVE_S = 10.0  # under FastAPI's 15 s ping, so a polling stream sends only ours
CLOSING_COMMENT = "server stopping; reconnect"
MAX_STREAM_S = 15 * 60.0

router = APIRouter(tags=["submissions"])


@router.get("/api/submissions/{submission_id}")
def submission_detail(submission: SubmissionDep, user: CurrentUser, session: SessionDep) -> SubmissionOut:
    """Return one submission with its verdict and the per-test results its viewer may see."""
    return SubmissionOut.of(submission, shown_tests(session=session, submission=submission, viewer=user, now=utcnow()))


@router.get("/api/me/submissions")
def my_submissions(user: CurrentUser, session: SessionDep) -> list[SubmissionOut]:
    """List my submissions, newest first."""
    mine = with_submission_details(session, list_for_user(session=session, user=user))
    shown = shown_for(session=session, submissions=mine, viewer=user, now=utcnow())
    return [SubmissionOut.of(s, shown[s.id]) for s in mine]


@router.get("/api/me/progress")
def my_progress(user: CurrentUser, session: SessionDep) -> list[ProgressOut]:
    """Return my standing on every published exercise."""
    mine = progress_by_exercise(session=session, user=user)
    exercises = with_current_versions(session, list_published(session=session))
    return [ProgressOut.of(e, mine.get(e.id, Progress())) for e in exercises]


@router.get("/api/submissions/{submission_id}/diff")
def submission_diff(submission: SubmissionDep, session: SessionDep) -> AttemptDiffOut:
    """Return the unified diff of this submission's code against its author's previous attempt."""
    previous = previous_attempt(session=session, submission=submission)
    lines = diff_lines(previous.code, submission.code) if previous else []
    return AttemptDiffOut.of(submission, previous, lines)


def _snapshot(factory: SessionFactory, submission_id: str, viewer_id: int) -> SubmissionOut | None:
    """Read the submission as its viewer may see it, in a short session of its own (runs in a worker thread)."""
    with factory() as session:
        session.expire_all()  # a reused session must not answer from its identity map
        submission = session.get(Submission, submission_id)
        viewer = session.get(User, viewer_id)
        if submission is None or viewer is None:
            return None
        return SubmissionOut.of(
            submission, shown_tests(session=session, submission=submission, viewer=viewer, now=utcnow())
        )


async def _status_events(
    request: Request, factory: SessionFactory, submission_id: str, viewer_id: int
) -> AsyncIterator[ServerSentEvent]:
    """Yield events until the submission settles, the client leaves, or the stream is too old."""
    started = last_frame = time.monotonic()
    poll_s = request.app.state.settings.events_poll_s
    last_key: tuple[str, str | None] | None = None
    # Subscribed before the first read, so a change committed between a read and the wait is not missed.
    async with news.Subscription(submission_id) as subscription:
        while time.monotonic() - started < MAX_STREAM_S:
            if await request.is_disconnected():
                return
            out = await run_in_threadpool(_snapshot, factory, submission_id, viewer_id)
            if out is None:
                return
            key = (out.status.value, out.verdict)
            if key != last_key:
                yield ServerSentEvent(event="status", data=out)
                last_key, last_frame = key, time.monotonic()
                if out.status in SETTLED:
                    return
            elif time.monotonic() - last_frame >= KEEPALIVE_S:
                yield ServerSentEvent(comment="keep-alive")
                last_frame = time.monotonic()
            # News wakes us at once (from any process when a broker is set); the poll is the safety net.
            await subscription.wait(poll_s)
            if news.closing():  # this server is stopping: end cleanly, the page reconnects to another one
                yield ServerSentEvent(comment=CLOSING_COMMENT)
                return


EVENTS_ANSWER: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events: `status` events whose data is the submission (SubmissionOut JSON), "
        "`: keep-alive` comments while nothing changes; the stream ends once the submission is graded",
        "content": {
            "text/event-stream": {
                "itemSchema": {
                    "required": ["event", "data"],
                    "properties": {
                        "event": {"const": "status"},
                        "data": {
                            "contentMediaType": "application/json",
                            "contentSchema": {"$ref": "#/components/schemas/SubmissionOut"},
                        },
                    },
                }
            }
        },
    }
}


async def no_transform(response: Response) -> None:
    """Add ``no-transform`` to the stream's Cache-Control, so no proxy compresses it and holds events back.

    FastAPI sends ``Cache-Control: no-cache`` and ``X-Accel-Buffering: no`` itself and appends the headers set
    here as a second field line (a list header: the two read as ``no-cache, no-transform``). A dependency,
    because the route's own body only runs once the response has started.
    """
    response.headers["Cache-Control"] = "no-transform"


@router.get(
    "/api/submissions/{submission_id}/events",
    response_class=EventSourceResponse,
    responses=EVENTS_ANSWER,
    dependencies=[Depends(no_transform)],
)
async def submission_events(
    request: Request, submission_id: str, _visible: SubmissionDep, user: CurrentUser, factory: SessionFactoryDep
) -> AsyncIterator[ServerSentEvent]:
    """Stream the submission's status as Server-Sent Events until it is graded."""
    # Ids, not rows (SubmissionDep checked the path's): the rows are detached once the request's session closes.
    async for event in _status_events(request, factory, submission_id, user.id):
        yield event
