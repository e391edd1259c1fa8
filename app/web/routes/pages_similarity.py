"""Similarity pages for staff: an exercise's or an assignment's checks and a form to start one, a run's ranked
pairs and clusters, and one pair side by side with the matched fragments highlighted.

Contract: an exercise's page and its form need the site's instructor or admin role (its list shows the runs of the
viewer's ``WorkScopeDep``; starting one, the practice course's staff: 403), an assignment's an instructor or TA of
its course; a run and its pairs are shown to whoever may see them through the API (``SimilarityRunDep``).
Starting is a CSRF-checked form that commits a queued run, hands it to the dispatcher and redirects to the run's
page, which polls ``/api/similarity/runs/{id}`` until the run is done (refused thresholds: the form again, 422).
Learners' code is rendered escaped (Jinja autoescape), split into matched and unmatched runs. Every page says that
a similarity is a hint for a person, never a penalty.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Annotated
from urllib.parse import quote

from fastapi import APIRouter, Form, Request
from fastapi.responses import Response
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.domain.courses.policy import WorkScope
from app.domain.dispatcher import Dispatcher
from app.domain.models import Assignment, Exercise, SimilarityPair, SimilarityRun, Submission, User
from app.domain.review import similarity
from app.domain.review.similarity_runs import HINT, create_run, pairs_of, runs_of, segments
from app.web.deps import (
    AssignmentStaffDep,
    DispatcherDep,
    InstructorDep,
    SessionDep,
    SimilarityPairDep,
    SimilarityRunDep,
    StaffExerciseDep,
    WorkScopeDep,
)
from app.web.pages import FORM_CSRF, flash, redirect, render
from worker.core.errors import Forbidden, GpulabError, InvalidInput

log = logging.getLogger(__name__)
router = APIRouter(prefix="/instructor", include_in_schema=False, dependencies=[FORM_CSRF])


def _params_form(noise_t: str, guarantee_t: str, display_t: str, cluster_t: str) -> similarity.Params:
    try:
        return similarity.Params(
            noise_t=int(noise_t), guarantee_t=int(guarantee_t), display_t=float(display_t), cluster_t=float(cluster_t)
        )
    except ValueError as exc:
        raise InvalidInput("the thresholds must be numbers") from exc


@dataclass(frozen=True)
class Scope:
    """What a similarity page is about: an exercise or an assignment, its crumbs, its form's target."""

    title: str
    crumbs: list[tuple[str, str]]
    action: str
    compares: str
    exercise: Exercise | None = None
    assignment: Assignment | None = None


def _exercise_scope(exercise: Exercise) -> Scope:
    url = f"/instructor/exercises/{quote(exercise.slug)}"
    return Scope(
        title=exercise.slug, crumbs=[("/instructor", "Instructor"), (url, exercise.slug)],
        action=f"{url}/similarity", exercise=exercise,
        compares="each learner's newest graded practice submission with every other's",
    )  # fmt: skip


def _assignment_scope(assignment: Assignment) -> Scope:
    course = assignment.course
    course_url = f"/courses/{quote(course.slug)}"
    return Scope(
        title=assignment.title,
        crumbs=[(course_url, course.title), (f"{course_url}/assignments/{assignment.id}", assignment.title)],
        action=f"/instructor/assignments/{assignment.id}/similarity", assignment=assignment,
        compares="for each code exercise of the assignment, the submission that counts for each learner",
    )  # fmt: skip


def _scope_page(
    request: Request, scope: Scope, session: Session, work: WorkScope, error: str = "", status_code: int = 200
) -> Response:
    runs = runs_of(session=session, scope=work, exercise=scope.exercise, assignment=scope.assignment)
    return render(
        request, "instructor/similarity.html", status_code=status_code, scope=scope, runs=runs,
        defaults=similarity.Params(), hint=HINT, error=error,
    )  # fmt: skip


def _start(
    request: Request, scope: Scope, session: Session, starter: Dispatcher, user: User, form: tuple[str, ...],
    work: WorkScope,
) -> Response:  # fmt: skip
    try:
        params = _params_form(*form)
        run = create_run(
            session=session, user=user, params=params, exercise=scope.exercise, assignment=scope.assignment
        )
        session.commit()
    except Forbidden:
        raise  # not theirs to start: the error page, not the form
    except GpulabError as exc:
        session.rollback()
        return _scope_page(request, scope, session, work, error=exc.message, status_code=422)
    try:
        starter.start_similarity(run.id)
    except Exception:  # committed: the page shows it queued; starting again sends a new one
        log.exception("could not send similarity run %s", run.id)
    flash(request, "Similarity check started: it runs in the background, this page follows it.")
    return redirect(f"/instructor/similarity/{run.id}")


FormText = Annotated[str, Form()]


@router.get("/exercises/{slug}/similarity")
def exercise_similarity(
    request: Request, _user: InstructorDep, exercise: StaffExerciseDep, work: WorkScopeDep, session: SessionDep
) -> Response:
    return _scope_page(request, _exercise_scope(exercise), session, work)


@router.post("/exercises/{slug}/similarity")
def start_exercise_similarity(
    request: Request,
    user: InstructorDep,
    exercise: StaffExerciseDep,
    work: WorkScopeDep,
    session: SessionDep,
    starter: DispatcherDep,
    noise_t: FormText = str(similarity.NOISE_T),
    guarantee_t: FormText = str(similarity.GUARANTEE_T),
    display_t: FormText = str(similarity.DISPLAY_T),
    cluster_t: FormText = str(similarity.CLUSTER_T),
) -> Response:
    form = (noise_t, guarantee_t, display_t, cluster_t)
    return _start(request, _exercise_scope(exercise), session, starter, user, form, work)


@router.get("/assignments/{assignment_id}/similarity")
def assignment_similarity(
    request: Request, access: AssignmentStaffDep, work: WorkScopeDep, session: SessionDep
) -> Response:
    return _scope_page(request, _assignment_scope(access.assignment), session, work)


@router.post("/assignments/{assignment_id}/similarity")
def start_assignment_similarity(
    request: Request,
    access: AssignmentStaffDep,
    work: WorkScopeDep,
    session: SessionDep,
    starter: DispatcherDep,
    noise_t: FormText = str(similarity.NOISE_T),
    guarantee_t: FormText = str(similarity.GUARANTEE_T),
    display_t: FormText = str(similarity.DISPLAY_T),
    cluster_t: FormText = str(similarity.CLUSTER_T),
) -> Response:
    form = (noise_t, guarantee_t, display_t, cluster_t)
    return _start(request, _assignment_scope(access.assignment), session, starter, access.user, form, work)


def _back(run: SimilarityRun) -> tuple[str, str]:
    if run.exercise is not None:
        return f"/instructor/exercises/{quote(run.exercise.slug)}/similarity", run.exercise.slug
    if run.assignment is not None:
        return f"/instructor/assignments/{run.assignment.id}/similarity", run.assignment.title
    return "/instructor", "similarity"


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
