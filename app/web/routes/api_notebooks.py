"""``/api/exercises/{slug}/notebook``: a code exercise as a Jupyter notebook, and submitting a notebook.

Contract: ``GET .../notebook`` answers the ``.ipynb`` file (``application/x-ipynb+json``, as an attachment named
``{slug}.ipynb``) that ``app.domain.exercises.notebooks.exercise_notebook`` builds. ``POST .../notebook-submissions``
takes
the notebook's file text, extracts the code of its ``solution``-tagged cells and submits that code exactly as
``POST .../submissions`` does (the same assignment gate, size rule and dispatch after the commit): the stored
submission's code is what was extracted. A notebook that cannot be read is refused (413 too large, 422 naming
the problem) before anything is gated or stored, so it costs no attempt.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from app.domain.courses import coursework
from app.domain.exercises import notebooks
from app.web.deps import CurrentUser, ExerciseDep, SessionDep, SubmitDep
from app.web.errors import problem_responses
from app.web.routes.api_exercises import SUBMIT_ERRORS
from app.web.schemas.submissions import NotebookIn, SubmissionCreated

router = APIRouter(prefix="/api/exercises", tags=["notebooks"])

NOTEBOOK_ANSWER: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The exercise as a Jupyter notebook (nbformat 4): prompt, a `solution`-tagged starter "
        "cell, the visible examples",
        "content": {notebooks.MEDIA_TYPE: {"schema": {"type": "object", "required": ["nbformat", "cells"]}}},
    },
    **problem_responses(422, described={422: "The exercise is not a code exercise"}),
}
NOTEBOOK_SUBMIT_ERRORS = {
    **SUBMIT_ERRORS,
    **problem_responses(
        413, 422,
        described={
            413: "The notebook (over 4 MiB) or the code extracted from it is larger than a submission may be",
            422: "The notebook cannot be used, and the detail says why: not JSON, not a notebook, invalid "
            "nbformat, too many cells, a kernel of another language, made for another exercise, no code cell "
            "tagged `solution`, or IPython magics in it; or the request does not match the schema",
        },
    ),
}  # fmt: skip


@router.get("/{slug}/notebook", response_class=Response, responses=NOTEBOOK_ANSWER)
def download_notebook(exercise: ExerciseDep, user: CurrentUser, session: SessionDep) -> Response:
    """Return the exercise as a Jupyter notebook to work on and submit (in the caller's variant, as on its page)."""
    params = coursework.learner_params(session=session, exercise=exercise, user=user)  # None: the default variant
    return Response(
        notebooks.notebook_text(exercise, params),
        media_type=notebooks.MEDIA_TYPE,
        headers={"Content-Disposition": f'attachment; filename="{exercise.slug}.ipynb"'},
    )


@router.post("/{slug}/notebook-submissions", status_code=202, responses=NOTEBOOK_SUBMIT_ERRORS)
def submit_notebook(
    body: NotebookIn, exercise: ExerciseDep, user: CurrentUser, submit: SubmitDep
) -> SubmissionCreated:  # fmt: skip
    """Grade the code of the notebook's `solution`-tagged cells as a submission."""
    code = notebooks.extract_code(body.notebook, slug=exercise.slug)  # before the gate: a refusal costs nothing
    submission = submit(user=user, exercise=exercise, code=code, assignment_id=body.assignment_id)
    return SubmissionCreated(id=submission.id, status=submission.status)
