"""Similarity pages for staff: an exercise's checks and a form to start one, a run's ranked pairs and clusters,
and one pair side by side with the matched fragments highlighted.

Contract: an exercise's page and its form need the site's instructor or admin role; a run and its pairs are shown
to whoever may see them through the API (``SimilarityRunDep``). Starting is a CSRF-checked form that commits a
queued run, hands it to the dispatcher and redirects to the run's page, which polls
``/api/similarity/runs/{id}`` until the run is done. Learners' code is rendered escaped (Jinja autoescape), split
into matched and unmatched runs. Every page says that a similarity is a hint for a person, never a penalty.
"""

from __future__ import annotations

import logging
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Request
from fastapi.responses import Response
from sqlalchemy import func, select

from app.domain import similarity
from app.domain.models import SimilarityPair, Submission
from app.domain.similarity_runs import create_run, pairs_of, runs_of, segments
from app.web.deps import InstructorDep, SessionDep, StaffExerciseDep
from app.web.pages import FORM_CSRF, flash, redirect, render
from app.web.routes.api_similarity import HINT, SimilarityPairDep, SimilarityRunDep, SimilarityStarterDep
from worker.core.errors import GpulabError, InvalidInput

log = logging.getLogger(__name__)
router = APIRouter(prefix="/instructor", include_in_schema=False, dependencies=[FORM_CSRF])


def _params_form(noise_t: str, guarantee_t: str, display_t: str, cluster_t: str) -> similarity.Params:
    try:
        return similarity.Params(
            noise_t=int(noise_t), guarantee_t=int(guarantee_t), display_t=float(display_t), cluster_t=float(cluster_t)
        )
    except ValueError as exc:
        raise InvalidInput("the thresholds must be numbers") from exc


@router.get("/exercises/{slug}/similarity")
def exercise_similarity(
    request: Request, user: InstructorDep, exercise: StaffExerciseDep, session: SessionDep
) -> Response:
    runs = runs_of(session=session, exercise=exercise)
    return render(
        request, "instructor/similarity.html", user=user, exercise=exercise, runs=runs, defaults=similarity.Params(),
        hint=HINT, error="",
    )  # fmt: skip


@router.post("/exercises/{slug}/similarity")
def start_exercise_similarity(
    request: Request,
    user: InstructorDep,
    exercise: StaffExerciseDep,
    session: SessionDep,
    starter: SimilarityStarterDep,
    noise_t: Annotated[str, Form()] = str(similarity.NOISE_T),
    guarantee_t: Annotated[str, Form()] = str(similarity.GUARANTEE_T),
    display_t: Annotated[str, Form()] = str(similarity.DISPLAY_T),
    cluster_t: Annotated[str, Form()] = str(similarity.CLUSTER_T),
) -> Response:
    try:
        params = _params_form(noise_t, guarantee_t, display_t, cluster_t)
        run = create_run(session=session, user=user, params=params, exercise=exercise)
        session.commit()
    except GpulabError as exc:
        session.rollback()
        return render(
            request, "instructor/similarity.html", status_code=422, user=user, exercise=exercise,
            runs=runs_of(session=session, exercise=exercise), defaults=similarity.Params(), hint=HINT,
            error=exc.message,
        )  # fmt: skip
    try:
        starter.start_similarity(run.id)
    except Exception:  # committed: the page shows it queued; starting again sends a new one
        log.exception("could not send similarity run %s", run.id)
    flash(request, "Similarity check started: it runs in the background, this page follows it.")
    return redirect(f"/instructor/similarity/{run.id}")


def _back(run: object) -> tuple[str, str]:
    exercise = getattr(run, "exercise", None)
    if exercise is not None:
        return f"/instructor/exercises/{quote(exercise.slug)}/similarity", exercise.slug
    assignment = getattr(run, "assignment", None)
    title = assignment.title if assignment is not None else "assignment"
    if assignment is not None:
        return f"/courses/{quote(assignment.course.slug)}/assignments/{assignment.id}", title
    return "/instructor", title


@router.get("/similarity/{run_id}")
def run_page(request: Request, run: SimilarityRunDep, session: SessionDep) -> Response:
    back, label = _back(run)
    pairs = pairs_of(session=session, run=run)
    by_id = {}
    for pair in pairs:
        by_id[pair.submission_a_id] = pair.submission_a
        by_id[pair.submission_b_id] = pair.submission_b
    missing = {sid for cluster in run.clusters for sid in cluster} - set(by_id)
    for sid in missing:
        found = session.get(Submission, sid)
        if found is not None:
            by_id[sid] = found
    return render(
        request, "instructor/similarity_run.html", run=run, pairs=pairs, back=back, back_label=label, by_id=by_id,
        hint=HINT,
    )  # fmt: skip


@router.get("/similarity/{run_id}/pairs/{rank}")
def pair_page(request: Request, run: SimilarityRunDep, pair: SimilarityPairDep, session: SessionDep) -> Response:
    back, label = _back(run)
    stored = session.scalar(select(func.count()).where(SimilarityPair.run_id == run.id))
    sides = [
        (pair.submission_a, pair.share_a, segments(pair.submission_a.code, pair.fragments.get("a", []))),
        (pair.submission_b, pair.share_b, segments(pair.submission_b.code, pair.fragments.get("b", []))),
    ]
    return render(
        request, "instructor/similarity_pair.html", run=run, pair=pair, sides=sides, back=back, back_label=label,
        hint=HINT, stored=stored or 0,
    )  # fmt: skip
