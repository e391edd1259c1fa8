"""Similarity checks as JSON: start one for an exercise or an assignment, follow it, read its pairs.

Contract: starting is staff only: an exercise's check (of its practice work) needs the site's instructor or admin
role (``StaffExerciseDep``) and a place on the practice course's staff (403 otherwise), an assignment's an
instructor or TA of its course (``AssignmentStaffDep``); an exercise's list shows the runs of the caller's
``WorkScopeDep``. Either answers
201 with the queued run; the run is committed first, then handed to the dispatcher's ``start_similarity`` (a
worker or the embedded server's thread does the comparing, never this request). A run and its pairs are shown to
those who may start it (``SimilarityRunDep``: 403 for anyone else, 404 for an unknown run or rank). Bad
thresholds are a 422. A similarity is a hint for a person to read both submissions, never a penalty.
"""

from __future__ import annotations

import logging

from fastapi import APIRouter
from pydantic import BaseModel, Field

from app.domain.dispatcher import Dispatcher
from app.domain.models import SimilarityPair, SimilarityRun, Submission
from app.domain.platform.clock import UtcDatetime
from app.domain.review import similarity
from app.domain.review.similarity_runs import HINT, create_run, pairs_of, runs_of
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
from app.web.errors import problem_responses

log = logging.getLogger(__name__)
router = APIRouter(tags=["similarity"])


class RunIn(BaseModel):
    """copydetect's thresholds; the defaults are those evaluated on the bank (docs/similarity.md)."""

    noise_t: int = Field(default=similarity.NOISE_T, ge=5, le=200, description="shortest match that counts")
    guarantee_t: int = Field(default=similarity.GUARANTEE_T, ge=5, le=400, description="every match this long is found")
    display_t: float = Field(default=similarity.DISPLAY_T, ge=0, le=1, description="pairs scoring less are not kept")
    cluster_t: float = Field(default=similarity.CLUSTER_T, ge=0, le=1, description="clusters join pairs scoring this")

    def params(self) -> similarity.Params:
        return similarity.Params(
            noise_t=self.noise_t, guarantee_t=self.guarantee_t, display_t=self.display_t, cluster_t=self.cluster_t
        )


class RunOut(BaseModel):
    id: int
    exercise: str | None = Field(description="the exercise's slug, for an exercise's check")
    assignment_id: int | None
    status: str = Field(description="queued, running, done or failed")
    params: dict[str, float]
    error: str | None
    submissions: int = Field(description="how many submissions were compared (one per learner and exercise)")
    pairs_found: int = Field(description="pairs at or above display_t; the highest 1,000 are kept")
    clusters: list[list[str]] = Field(description="submission ids, three or more similar ones each")
    requested_by: str | None
    created_at: UtcDatetime
    finished_at: UtcDatetime | None
    hint: str = HINT

    @classmethod
    def of(cls, run: SimilarityRun) -> RunOut:
        return cls(
            id=run.id, exercise=run.exercise.slug if run.exercise else None, assignment_id=run.assignment_id,
            status=run.status, params=dict(run.params), error=run.error, submissions=run.submissions,
            pairs_found=run.pairs_found, clusters=[list(c) for c in run.clusters],
            requested_by=run.requested_by.email if run.requested_by else None, created_at=run.created_at,
            finished_at=run.finished_at,
        )  # fmt: skip


class SideOut(BaseModel):
    submission_id: str
    learner: str | None
    created_at: UtcDatetime
    share: float = Field(description="of this side's fingerprinted code, the share found in the other")

    @classmethod
    def of(cls, submission: Submission, share: float) -> SideOut:
        learner = submission.user.email if submission.user else None
        return cls(submission_id=submission.id, learner=learner, created_at=submission.created_at, share=share)


class PairOut(BaseModel):
    rank: int
    exercise: str
    score: float = Field(description="the larger of the two shares")
    tokens: int = Field(description="matched tokens")
    a: SideOut
    b: SideOut

    @classmethod
    def of(cls, pair: SimilarityPair) -> PairOut:
        return cls(
            rank=pair.rank, exercise=pair.exercise.slug, score=pair.score, tokens=pair.tokens,
            a=SideOut.of(pair.submission_a, pair.share_a), b=SideOut.of(pair.submission_b, pair.share_b),
        )  # fmt: skip


class RunDetailOut(RunOut):
    pairs: list[PairOut] = Field(default_factory=list, description="highest first")


class PairSideOut(SideOut):
    code: str
    fragments: list[list[int]] = Field(description="matched [start, end) character offsets into code")


class PairDetailOut(BaseModel):
    rank: int
    exercise: str
    score: float
    tokens: int
    a: PairSideOut
    b: PairSideOut
    hint: str = HINT


START_ERRORS = problem_responses(
    422, described={422: "The thresholds are out of range, or there is no code exercise to compare"}
)


def _start(run: SimilarityRun, starter: Dispatcher) -> None:
    try:
        starter.start_similarity(run.id)
    except Exception:  # committed: it stays queued, and starting the check again sends a new one
        log.exception("could not send similarity run %s", run.id)


@router.post(
    "/api/instructor/exercises/{slug}/similarity",
    status_code=201,
    responses=START_ERRORS | problem_responses(403, described={403: "Not on the practice course's staff"}),
)
def start_exercise_run(
    body: RunIn, exercise: StaffExerciseDep, user: InstructorDep, session: SessionDep, starter: DispatcherDep
) -> RunOut:
    """Start a similarity check of the exercise's counted submissions (one per learner); it runs as a job."""
    run = create_run(session=session, user=user, params=body.params(), exercise=exercise)
    session.commit()
    _start(run, starter)
    return RunOut.of(run)


@router.get("/api/instructor/exercises/{slug}/similarity")
def exercise_runs(exercise: StaffExerciseDep, scope: WorkScopeDep, session: SessionDep) -> list[RunOut]:
    """List the exercise's similarity checks that the caller may read, newest first."""
    return [RunOut.of(run) for run in runs_of(session=session, scope=scope, exercise=exercise)]


@router.post("/api/assignments/{assignment_id}/similarity", status_code=201, responses=START_ERRORS)
def start_assignment_run(
    body: RunIn, access: AssignmentStaffDep, session: SessionDep, starter: DispatcherDep
) -> RunOut:
    """Start a similarity check of the submissions that count in the assignment, exercise by exercise."""
    run = create_run(session=session, user=access.user, params=body.params(), assignment=access.assignment)
    session.commit()
    _start(run, starter)
    return RunOut.of(run)


@router.get("/api/assignments/{assignment_id}/similarity")
def assignment_runs(access: AssignmentStaffDep, scope: WorkScopeDep, session: SessionDep) -> list[RunOut]:
    """List the assignment's similarity checks, newest first."""
    return [RunOut.of(run) for run in runs_of(session=session, scope=scope, assignment=access.assignment)]


READ_ERRORS = problem_responses(
    403, 404, described={403: "Not an admin or staff of the run's course", 404: "No such run or pair"}
)


@router.get("/api/similarity/runs/{run_id}", responses=READ_ERRORS)
def run_detail(run: SimilarityRunDep, session: SessionDep) -> RunDetailOut:
    """Return a run: its status and, once done, its ranked pairs (without code) and clusters."""
    pairs = [PairOut.of(pair) for pair in pairs_of(session=session, run=run)]
    return RunDetailOut(**RunOut.of(run).model_dump(), pairs=pairs)


@router.get("/api/similarity/runs/{run_id}/pairs/{rank}", responses=READ_ERRORS)
def pair_detail(pair: SimilarityPairDep) -> PairDetailOut:
    """Return one pair side by side: both submissions' code and the matched fragments of each."""
    sides = {}
    for side, submission, share in (("a", pair.submission_a, pair.share_a), ("b", pair.submission_b, pair.share_b)):
        base = SideOut.of(submission, share).model_dump()
        sides[side] = PairSideOut(**base, code=submission.code, fragments=pair.fragments.get(side, []))
    return PairDetailOut(
        rank=pair.rank, exercise=pair.exercise.slug, score=pair.score, tokens=pair.tokens, a=sides["a"], b=sides["b"]
    )
