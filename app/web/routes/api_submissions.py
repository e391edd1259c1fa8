"""``/api/submissions`` and ``/api/me``: a submission's result, its live status stream and diff, my list and progress.

Contract: learners see only their own submissions (others' are 404); staff see all. A submission's diff is
against its author's previous attempt on the same exercise (``previous_id`` null and no lines for the first).
The events stream is ``text/event-stream``: an ``event: status`` whose data is the ``SubmissionOut`` JSON,
sent first and then at every change of status or verdict (at once on news, see ``app.domain.news``: from this process,
and from every process when a broker is set; else within ``settings.events_poll_s``), a ``: keep-alive``
comment every ``KEEPALIVE_S`` without change, and it ends after the first graded/error event, when the client
goes away, after ``MAX_STREAM_S``, or (with a ``CLOSING_FRAME`` comment) when the server is stopping.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from app.domain import news
from app.domain.exercises import list_published
from app.domain.models import Submission
from app.domain.progress import Progress, diff_lines, previous_attempt, progress_by_exercise
from app.domain.schemas import SETTLED, AttemptDiffOut, ProgressOut, SubmissionOut
from app.domain.submissions import list_for_user
from app.web.deps import CurrentUser, SessionDep, SessionFactory, SessionFactoryDep, SubmissionDep
from app.web.routes.preload import with_current_versions, with_submission_details

KEEPALIVE_S = 15.0
CLOSING_FRAME = ": server stopping; reconnect\n\n"
MAX_STREAM_S = 15 * 60.0

router = APIRouter(tags=["submissions"])


@router.get("/api/submissions/{submission_id}")
def submission_detail(submission: SubmissionDep) -> SubmissionOut:
    """Return one submission with its verdict and per-test results."""
    return SubmissionOut.of(submission)


@router.get("/api/me/submissions")
def my_submissions(user: CurrentUser, session: SessionDep) -> list[SubmissionOut]:
    """List my submissions, newest first."""
    return [SubmissionOut.of(s) for s in with_submission_details(session, list_for_user(session=session, user=user))]


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


def _snapshot(factory: SessionFactory, submission_id: str) -> SubmissionOut | None:
    """Read the submission in a short session of its own (runs in a worker thread)."""
    with factory() as session:
        session.expire_all()  # a reused session must not answer from its identity map
        submission = session.get(Submission, submission_id)
        return SubmissionOut.of(submission) if submission is not None else None


def _event(out: SubmissionOut) -> str:
    return f"event: status\ndata: {out.model_dump_json()}\n\n"


async def _status_events(request: Request, factory: SessionFactory, submission_id: str) -> AsyncIterator[str]:
    """Yield SSE frames until the submission settles, the client leaves, or the stream is too old."""
    started = last_frame = time.monotonic()
    poll_s = request.app.state.settings.events_poll_s
    last_key: tuple[str, str | None] | None = None
    # Subscribed before the first read, so a change committed between a read and the wait is not missed.
    async with news.Subscription(submission_id) as subscription:
        while time.monotonic() - started < MAX_STREAM_S:
            if await request.is_disconnected():
                return
            out = await run_in_threadpool(_snapshot, factory, submission_id)
            if out is None:
                return
            key = (out.status.value, out.verdict)
            if key != last_key:
                yield _event(out)
                last_key, last_frame = key, time.monotonic()
                if out.status in SETTLED:
                    return
            elif time.monotonic() - last_frame >= KEEPALIVE_S:
                yield ": keep-alive\n\n"
                last_frame = time.monotonic()
            # News wakes us at once (from any process when a broker is set); the poll is the safety net.
            await subscription.wait(poll_s)
            if news.closing():  # this server is stopping: end cleanly, the page reconnects to another one
                yield CLOSING_FRAME
                return


@router.get("/api/submissions/{submission_id}/events", response_class=StreamingResponse)
async def submission_events(
    request: Request, submission: SubmissionDep, factory: SessionFactoryDep
) -> StreamingResponse:
    """Stream the submission's status as Server-Sent Events until it is graded."""
    return StreamingResponse(
        _status_events(request, factory, submission.id),
        media_type="text/event-stream",
        # no-transform and X-Accel-Buffering keep proxies from holding events back.
        headers={"Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no"},
    )
