"""``/api/admin``: the dashboard's numbers and worker liveness as JSON, and user management.

Contract: admins only (``AdminDep``: 401 logged out, 403 for everyone else). State changes are JSON bodies, so
the API's CSRF rule covers them; they follow ``app.domain.accounts.people`` (no changing one's own role, no disabling
oneself).
"""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select

from app.domain.accounts import people
from app.domain.models import Role, User
from app.domain.operations import liveness
from app.domain.operations.dashboard import grade_matrix, histogram, timing
from app.domain.platform.clock import UtcDatetime
from app.jobs.queue_state import queue_state
from app.web.deps import AdminDep, SessionDep, SettingsDep, UserDep
from app.web.errors import problem_responses

router = APIRouter(prefix="/api/admin", tags=["admin"])
NO_NUL = r"^[^\x00]*$"


class ExerciseStatsOut(BaseModel):
    slug: str
    attempts: int
    learners: int
    passed: int
    pass_rate: float | None
    median_attempts_to_pass: float | None
    score_histogram: list[int]


class QueuesOut(BaseModel):
    mode: str
    queues: dict[str, int | None]
    workers: dict[str, int | None]
    notes: list[str]


class StatsOut(BaseModel):
    exercises: list[ExerciseStatsOut]
    timing: dict[str, float | None]
    queues: QueuesOut


class LivenessOut(BaseModel):
    now: UtcDatetime
    workers: list[liveness.WorkerState] = Field(
        description=f"the {liveness.WORKERS_SHOWN} most recently seen, newest first"
    )
    required_queues: list[str] = Field(description="queues that need a live worker (cpu, and those of published "
                                       "exercises)")  # fmt: skip
    live_workers: dict[str, int]
    stranded: list[liveness.StrandedSubmission] = Field(
        description=f"the {liveness.STRANDED_SHOWN} oldest stranded submissions"
    )
    stranded_total: int
    worker_stale_s: float
    grading_lease_s: float
    stranded_queued_s: float


class UserOut(BaseModel):
    id: int
    email: str
    name: str
    role: Role
    active: bool

    @classmethod
    def of(cls, user: User) -> UserOut:
        return cls(id=user.id, email=user.email, name=user.name, role=user.role, active=user.is_active)


class UserIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    email: str = Field(max_length=320)
    name: str = Field(default="", max_length=200, pattern=NO_NUL)  # PostgreSQL text cannot hold a NUL
    role: Role = Role.learner
    password: str = Field(default="", max_length=1024)


class UserCreatedOut(UserOut):
    password: str  # empty when the admin chose it


class UserChangeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Role | None = None
    active: bool | None = None


@router.get("/stats")
def stats(session: SessionDep, settings: SettingsDep, _admin: AdminDep) -> StatsOut:
    """Return per-exercise attempts, pass rates and score histograms, grading times and queue state."""
    matrix = grade_matrix(session=session)
    queues = queue_state(session=session, settings=settings)
    return StatsOut(
        exercises=[
            ExerciseStatsOut(
                slug=r.slug, attempts=r.attempts, learners=r.learners, passed=r.passed, pass_rate=r.pass_rate,
                median_attempts_to_pass=r.median_attempts_to_pass, score_histogram=histogram(r.fractions),
            )
            for r in matrix.exercises
        ],
        timing=timing(session=session),
        queues=QueuesOut(mode=queues.mode, queues=queues.queues, workers=queues.workers, notes=queues.notes),
    )  # fmt: skip


@router.get("/liveness")
def worker_liveness(session: SessionDep, settings: SettingsDep, _admin: AdminDep) -> LivenessOut:
    """Return each grading process's last beat (live, dead or stopped) and every stranded submission."""
    view = liveness.overview(session=session, settings=settings, now=datetime.now(UTC))
    return LivenessOut(
        now=view.now, workers=view.workers, required_queues=view.required,
        live_workers=view.live, stranded=view.stranded,
        stranded_total=view.stranded_total, worker_stale_s=view.worker_stale_s,
        grading_lease_s=view.grading_lease_s, stranded_queued_s=view.stranded_queued_s,
    )  # fmt: skip


@router.get("/users")
def list_users(session: SessionDep, _admin: AdminDep) -> list[UserOut]:
    """List every account."""
    return [UserOut.of(u) for u in session.scalars(select(User).order_by(User.email))]


CREATE_ERRORS = problem_responses(
    409, 422,
    described={
        409: "A user with this e-mail already exists",
        422: "The request does not match the schema, or the e-mail, name or password breaks a rule",
    },
)  # fmt: skip
CHANGE_ERRORS = problem_responses(
    422, described={422: "The request does not match the schema, or an admin changes their own role or disables "
                    "themselves"}
)  # fmt: skip


@router.post("/users", status_code=201, responses=CREATE_ERRORS)
def create_user(body: UserIn, session: SessionDep, _admin: AdminDep) -> UserCreatedOut:
    """Create an account; without a password a random one is returned once."""
    account = people.create_account(
        session=session, email=body.email, name=body.name, role=body.role, password=body.password
    )
    session.commit()
    user = session.scalars(select(User).where(User.email == account.email)).one()
    return UserCreatedOut(**UserOut.of(user).model_dump(), password="" if body.password else account.password)


@router.post("/users/{user_id}", responses=CHANGE_ERRORS)
def change_user(body: UserChangeIn, target: UserDep, session: SessionDep, admin: AdminDep) -> UserOut:
    """Change an account's role and/or enable or disable it."""
    if body.role is not None:
        people.set_role(session=session, actor=admin, user=target, role=body.role)
    if body.active is not None:
        people.set_active(session=session, actor=admin, user=target, active=body.active)
    session.commit()
    return UserOut.of(target)
