"""``/api/exercises``: the published exercises, their safe details, submitting code, my progress and attempts.
``/api/path``: the learning path's modules, with the caller's standing in each when they are a learner.

Contract: everything needs a login. A submission is committed before it is dispatched, so a crash between
the two (or a broker that is down) leaves a queued row that the sweeper (``app.jobs.sweeper``) sends later, never
a lost grade.
``POST /{slug}/runs`` grades code against the visible ``examples/`` tests at once and answers with the
``SubmissionOut`` shape (``id`` empty): nothing is stored, runs are bounded per process and rate-limited per
user (429 with Retry-After).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from starlette.concurrency import run_in_threadpool

from app.domain.courses import coursework, timing
from app.domain.courses.visibility import shown_for
from app.domain.exercises.bank import list_published
from app.domain.exercises.example_runs import RunGate, run_examples_now
from app.domain.exercises.learning_path import path_for
from app.domain.models import Exercise, utcnow
from app.domain.submissions.progress import attempts_for, progress_for
from app.web.deps import CurrentUser, DispatcherDep, ExerciseDep, SessionDep, SettingsDep, SubmitDep
from app.web.errors import problem_responses
from app.web.routes.preload import with_current_versions, with_submission_details
from app.web.schemas.exercises import ExerciseDetail, ExerciseSummary, PathOut
from app.web.schemas.submissions import ProgressOut, SubmissionCreated, SubmissionIn, SubmissionOut, example_run_out
from app.web.sessions import client_ip

log = logging.getLogger(__name__)
router = APIRouter(prefix="/api/exercises", tags=["exercises"])
path_router = APIRouter(prefix="/api/path", tags=["exercises"])
_gate_lock = threading.Lock()


# Example runs one API process may wait on at once in Celery mode (each holds a threadpool thread of 40).
CELERY_RUN_WAITERS = 16


async def get_run_gate(request: Request) -> RunGate:
    """Return the process's example-run gate, made on first use.

    Embedded, runs grade in this process: one slot per grading worker. With a broker this process only waits
    on the workers' fast lane, so it may wait on more runs at once (the lane's own concurrency paces them).
    """
    with _gate_lock:
        gate: RunGate | None = getattr(request.app.state, "run_gate", None)
        if gate is None:
            state = request.app.state  # per-user counts live in the app's limiter, shared across processes
            slots = CELERY_RUN_WAITERS if state.settings.broker_url else state.settings.grading_workers
            gate = state.run_gate = RunGate(max_parallel=slots, limiter=state.rate_limiter)
        return gate


RunGateDep = Annotated[RunGate, Depends(get_run_gate)]

DETAIL_CACHE_SIZE = 256
_details: OrderedDict[tuple[str, int, str], ExerciseDetail] = OrderedDict()
_details_lock = threading.Lock()


async def exercise_detail_of(exercise: Exercise) -> ExerciseDetail:
    """Return ``ExerciseDetail.of(exercise)``, built once per version content and then served from memory.

    A version never changes (``app.domain.models``), and the key holds everything the answer is made of: the slug, the
    version number and the hash of all its files (title, kind, points... are read from those files). Building it
    (Markdown, a quiz's TOML) runs in the threadpool; a cached answer needs no thread at all. The answer is shared
    between requests: read it, never change it.
    """
    version = exercise.current_version
    if version is None:  # get_published never returns these; let the schema raise as it always did
        return ExerciseDetail.of(exercise)
    key = (exercise.slug, version.number, version.content_hash)
    with _details_lock:
        detail = _details.get(key)
        if detail is not None:
            _details.move_to_end(key)
            return detail
    detail = await run_in_threadpool(ExerciseDetail.of, exercise)
    with _details_lock:
        _details[key] = detail
        while len(_details) > DETAIL_CACHE_SIZE:
            _details.popitem(last=False)
    return detail


@path_router.get("")
def learning_path(session: SessionDep, user: CurrentUser) -> PathOut:
    """Return the learning path: its modules in order and, for a learner, how far they are through each."""
    exercises = list(with_current_versions(session, list_published(session=session)))
    return PathOut.of(path_for(session=session, user=user, exercises=exercises))


@router.get("")
def list_exercises(session: SessionDep, user: CurrentUser) -> list[ExerciseSummary]:
    """List the published exercises."""
    timing.lockout(session=session, user=user, assignment_id=None, now=utcnow())  # closed while an exam runs
    return [ExerciseSummary.of(e) for e in with_current_versions(session, list_published(session=session))]


@router.get("/{slug}")
async def exercise_detail(exercise: ExerciseDep, user: CurrentUser, session: SessionDep) -> ExerciseDetail:
    """Return one exercise: prompt, starter code and the visible example tests (in the caller's variant)."""
    detail = await exercise_detail_of(exercise)
    if not detail.params:  # no parameters: one answer for everyone, served from memory
        return detail
    # As the practice page shows it: the variant of the context a submission without an assignment counts under.
    params = await run_in_threadpool(coursework.learner_params, session=session, exercise=exercise, user=user)
    return ExerciseDetail.of(exercise, params=params)


CODE_ERRORS = {
    413: "The code is larger than a submission may be",
    422: "The request does not match the schema, the code holds a NUL character, or the exercise is not code",
}
GATE_ERRORS = {
    403: "Under an assignment: not open yet, closed, no attempts left (or a cross-site request); the detail says which",
    404: "No such exercise, or no such assignment for this user",
    429: "Under an assignment: its submission rate is used up; wait Retry-After seconds",
}
SUBMIT_ERRORS = problem_responses(403, 404, 413, 422, 429, described=CODE_ERRORS | GATE_ERRORS)


@router.post("/{slug}/submissions", status_code=202, responses=SUBMIT_ERRORS)
def submit(body: SubmissionIn, exercise: ExerciseDep, user: CurrentUser, submit: SubmitDep) -> SubmissionCreated:
    """Store the code as a queued submission and hand it to grading."""
    submission = submit(user=user, exercise=exercise, code=body.code, assignment_id=body.assignment_id)
    return SubmissionCreated(id=submission.id, status=submission.status)


RUN_ERRORS = problem_responses(
    404, 413, 422, 429, 503,
    described={
        **CODE_ERRORS,
        422: "The request does not match the schema, the code holds a NUL character, or the exercise has no "
        "example tests",
        404: "No such exercise, or the assignment_id given is not one of this user's holding the exercise",
        429: "Too many example runs, or the runner is busy; wait Retry-After seconds",
        503: "No example runner answered within GPULAB_EXAMPLE_RUN_WAIT_S (Celery mode) or the broker is "
        "unreachable: nothing was stored; try again after Retry-After seconds",
    },
)  # fmt: skip


@router.post("/{slug}/runs", responses=RUN_ERRORS)
def run_examples(
    body: SubmissionIn,
    exercise: ExerciseDep,
    user: CurrentUser,
    session: SessionDep,
    settings: SettingsDep,
    gate: RunGateDep,
    runner: DispatcherDep,
    request: Request,
) -> SubmissionOut:
    """Grade the code against the visible example tests now, in my variant there; nothing is stored or counted.

    ``assignment_id``: the assignment page the run is made on (its variant); none: the practice page's.
    """
    started = utcnow()
    version = exercise.current_version
    assert version is not None  # get_published only returns exercises with a current version
    params = coursework.run_variant(
        session=session, exercise=exercise, user=user, assignment_id=body.assignment_id, client_ip=client_ip(request)
    )
    outcome = run_examples_now(
        version=version, code=body.code, user_id=user.id, gate=gate, settings=settings, runner=runner, params=params
    )
    return example_run_out(version, outcome, started)


@router.get("/{slug}/progress")
def my_progress(exercise: ExerciseDep, user: CurrentUser, session: SessionDep) -> ProgressOut:
    """Return my standing on this exercise: state, attempts and best score."""
    return ProgressOut.of(exercise, progress_for(session=session, user=user, exercise=exercise))


@router.get("/{slug}/attempts")
def my_attempts(exercise: ExerciseDep, user: CurrentUser, session: SessionDep) -> list[SubmissionOut]:
    """List my submissions to this exercise (any version), newest first."""
    attempts = with_submission_details(session, attempts_for(session=session, user=user, exercise=exercise))
    shown = shown_for(session=session, submissions=attempts, viewer=user, now=utcnow())  # visibility tiers
    return [SubmissionOut.of(s, shown[s.id]) for s in attempts]
