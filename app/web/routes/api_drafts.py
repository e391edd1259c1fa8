"""``/api/exercises/{slug}/draft``: the learner's unsubmitted work, saved as they type, restored on any device.

Contract (``app.domain.courses.drafts``): ``GET`` returns the draft of the page's item (``?assignment_id=``, or
practice), revision 0 when there is none; ``PUT`` stores a new revision from ``base_revision`` (409 naming the
stored revision when another tab or device saved since: nothing is overwritten silently), ``DELETE`` removes it
(back to the starter). A draft is never an attempt: it passes no gate and costs nothing. A token needs ``read``
to read and ``submit`` to write, as for submissions.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from app.domain.courses import drafts
from app.web.deps import CurrentUser, ExerciseDep, SessionDep, SettingsDep
from app.web.errors import problem_responses
from app.web.schemas.common import MAX_ID
from app.web.schemas.drafts import DraftIn, DraftOut
from app.web.sessions import client_ip

router = APIRouter(prefix="/api/exercises", tags=["drafts"])
AssignmentQuery = Annotated[
    int | None, Query(ge=1, le=MAX_ID, description="the assignment page the draft belongs to (none: practice)")
]

NOT_FOUND = {404: "No such exercise, or no such assignment with it for this user"}
SAVE_ERRORS = problem_responses(
    403, 404, 409, 422,
    described={
        **NOT_FOUND,
        403: "A timed assignment's time is over, not started, or not from its network; or another exam runs for "
        "this learner (or a cross-site request)",
        409: "Another tab or device saved this draft since the page's base revision (the detail names the stored one)",
        422: "Code over the size limit or with a NUL, answers naming no such question or option, or code sent for a "
        "quiz (answers for a code exercise)",
    },
)  # fmt: skip


@router.get("/{slug}/draft", responses=problem_responses(404, described=NOT_FOUND))
def get_draft(
    exercise: ExerciseDep, user: CurrentUser, session: SessionDep,
    assignment_id: AssignmentQuery = None,
) -> DraftOut:  # fmt: skip
    """Return my draft of this exercise on this page (revision 0 when there is none)."""
    under = drafts.place(session=session, exercise=exercise, user=user, assignment_id=assignment_id)
    return DraftOut.of(drafts.find(session=session, exercise=exercise, user=user, assignment=under))


@router.put("/{slug}/draft", responses=SAVE_ERRORS)
def save_draft(
    body: DraftIn, exercise: ExerciseDep, user: CurrentUser, session: SessionDep, settings: SettingsDep,
    request: Request,
) -> DraftOut:  # fmt: skip
    """Save my draft as a new revision of the one my page started from."""
    under = drafts.place(session=session, exercise=exercise, user=user, assignment_id=body.assignment_id)
    draft = drafts.save(
        session=session, exercise=exercise, user=user, assignment=under, base_revision=body.base_revision,
        code=body.code, answers=body.answers, max_code_bytes=settings.max_code_bytes, client_ip=client_ip(request),
    )  # fmt: skip
    out = DraftOut.of(draft)
    session.commit()
    return out


@router.delete("/{slug}/draft", status_code=204, responses=problem_responses(404, described=NOT_FOUND))
def discard_draft(
    exercise: ExerciseDep, user: CurrentUser, session: SessionDep,
    assignment_id: AssignmentQuery = None,
) -> Response:  # fmt: skip
    """Remove my draft (my page goes back to the starter)."""
    under = drafts.place(session=session, exercise=exercise, user=user, assignment_id=assignment_id)
    drafts.discard(session=session, exercise=exercise, user=user, assignment=under)
    session.commit()
    return Response(status_code=204)
