"""The tables: users, exercises with immutable versions, submissions and their per-test results.

Contract:
- An ``ExerciseVersion`` is never edited after it is created: a changed exercise folder becomes a new
  version, and ``Exercise.current_version`` moves to it. A ``Submission`` points at the version it was
  submitted against, so its grade always refers to the tests that produced it.
- ``ExerciseVersion.files`` holds every file of the folder (hidden tests and solutions included); only the
  worker reads it. API schemas expose a safe subset.
- ``Submission.status`` moves queued → running → graded | error; ``verdict`` is set with graded/error.
- Drafts: a version that is not ``Exercise.current_version`` is a draft (or an older version); learners only
  ever get ``current_version`` of an exercise with ``is_published``. ``ExerciseVersion.source`` says where a
  version came from (``bank`` sync, ``upload``, ``editor``): sync only unpublishes exercises it owns.
- ``LearningPathVersion`` is one synced ``exercises/path.toml`` (its modules as JSON), never edited; the newest row
  is the path (one with no modules: the bank has none). Its slugs name exercises, loosely: an exercise the path
  names that is not published is left out where the path is shown.
- ``GradingRecord`` keeps a submission's earlier result each time staff regrade it; ``ExerciseCheck`` is one
  background run of the bank check on a version. Neither changes the version itself.
- Leases: a ``running`` submission (or check) is held by whoever claimed it while ``heartbeat_at`` is recent;
  ``attempts`` is the fencing token of that claim. ``dispatched_at`` is when it was last handed to a queue.
- Courses: a ``Course`` has members (``CourseMember``: instructor, TA or learner there) and ``Assignment``s,
  each an ordered set of ``AssignmentItem``s (an exercise and its weight) with UTC dates, a late policy, which
  attempt counts and attempt limits. An ``Extension`` gives one learner new dates (audited: granted by, why,
  revoked); a ``GradeOverride`` replaces one gradebook cell (audited, reversible). A ``Submission`` made under
  an assignment carries its ``assignment_id``. The rules live in ``app.domain.courses.membership``/``assignments``.
- LTI 1.3 (``app.domain.lti``): an ``LtiPlatform`` is one registered client of a platform's issuer, with its
  known deployment ids; ``LtiToolKey`` rows are gpulab's own signing keys; ``LtiNonce`` remembers used launch
  nonces until they expire; ``LtiUser``/``LtiContext``/``LtiLink`` map the platform's users, courses (per
  deployment) and resource links to gpulab's users, courses and assignments or exercises.
- ``WorkerBeat`` is one grading process's latest sign of life (every worker and the embedded server write
  theirs); ``RevokedSession`` is a logged-out session nonce, shared by every API process. An ``ApiToken`` is a
  personal access token of the API: its SHA-256 hash, a short prefix, its scopes, last use and revocation.
- Similarity (``app.domain.review.similarity_runs``): a ``SimilarityRun`` is one check of an exercise's (or an
  assignment's) counted submissions, a job moving queued → running → done | failed; its ``SimilarityPair`` rows
  are the pairs it ranked, with each side's matched character slices (capped in number).
- Regrade requests (``app.domain.review.regrade_requests``): a ``RegradeRequest`` is one learner's request on one item
  (exercise x assignment, or practice), at most one per item; its ``RegradeMessage`` rows are the thread, each
  with its author and what it did.
- Manual grading (``app.domain.review.staff_grading``): a ``ManualGrade`` is staff's grade of one staff-graded text
  answer of a quiz attempt (the rubric item ids that apply, a comment, who and when, a revision counter), made
  when the attempt is stored; its points reach the submission's score once it is released.
"""

from __future__ import annotations

import enum
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    DDL,
    JSON,
    ColumnElement,
    DateTime,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
    event,
    false,
    select,
    text,
    true,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.domain.platform.db import Base
from worker.core.outcome import Verdict


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_id() -> str:
    return uuid.uuid4().hex


class Role(enum.StrEnum):
    learner = "learner"
    instructor = "instructor"
    admin = "admin"


class SubmissionStatus(enum.StrEnum):
    queued = "queued"
    running = "running"
    graded = "graded"
    error = "error"


def _enum(cls: type[enum.Enum], name: str) -> Enum:
    # Stored as plain strings (no native enum types) so SQLite and PostgreSQL migrate alike.
    return Enum(cls, name=name, native_enum=False, length=32, values_callable=lambda e: [m.value for m in e])


class User(Base):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    email: Mapped[str] = mapped_column(String(320), unique=True, index=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    role: Mapped[Role] = mapped_column(_enum(Role, "role"), default=Role.learner)
    is_active: Mapped[bool] = mapped_column(default=True)
    name: Mapped[str] = mapped_column(String(200), default="", server_default="")
    # Set while the password is a one-time one someone else handed over (CSV enrollment, an admin's reset).
    must_change_password: Mapped[bool] = mapped_column(default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # Set when an admin erased this person (app.domain.privacy): the row stays, holding nothing of them, so the
    # gradebooks, boards and insights of others keep their numbers and show "erased user".
    erased_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    submissions: Mapped[list[Submission]] = relationship(back_populates="user")


class Exercise(Base):
    __tablename__ = "exercises"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    slug: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    current_version_id: Mapped[int | None] = mapped_column(
        ForeignKey("exercise_versions.id", use_alter=True, ondelete="SET NULL"), nullable=True
    )
    is_published: Mapped[bool] = mapped_column(default=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    versions: Mapped[list[ExerciseVersion]] = relationship(
        back_populates="exercise", foreign_keys="ExerciseVersion.exercise_id", order_by="ExerciseVersion.number"
    )
    current_version: Mapped[ExerciseVersion | None] = relationship(foreign_keys=[current_version_id], post_update=True)


class ExerciseVersion(Base):
    __tablename__ = "exercise_versions"
    __table_args__ = (UniqueConstraint("exercise_id", "number"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    exercise_id: Mapped[int] = mapped_column(ForeignKey("exercises.id", ondelete="CASCADE"), index=True)
    number: Mapped[int] = mapped_column(Integer)
    content_hash: Mapped[str] = mapped_column(String(64))
    title: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(16))
    topic: Mapped[str] = mapped_column(String(100))
    difficulty: Mapped[str] = mapped_column(String(16))
    framework: Mapped[str] = mapped_column(String(16))
    queue: Mapped[str] = mapped_column(String(8))
    max_score: Mapped[float] = mapped_column(Float)
    files: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    source: Mapped[str] = mapped_column(String(16), default="bank", server_default="bank")
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)

    exercise: Mapped[Exercise] = relationship(back_populates="versions", foreign_keys=[exercise_id])
    created_by: Mapped[User | None] = relationship()


class LearningPathVersion(Base):
    """One synced ``exercises/path.toml``, never edited: the newest row is the path learners see."""

    __tablename__ = "learning_paths"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    content_hash: Mapped[str] = mapped_column(String(64))  # of the file's text; "" for a bank without a path
    data: Mapped[dict[str, Any]] = mapped_column(JSON)  # worker.bank.learning_path.LearningPath.as_json()
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class Submission(Base):
    __tablename__ = "submissions"
    __table_args__ = (
        Index("ix_submissions_user_created", "user_id", "created_at"),
        Index("ix_submissions_status", "status"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    exercise_version_id: Mapped[int] = mapped_column(ForeignKey("exercise_versions.id"), index=True)
    # The assignment it was made under (its dates, attempt limit and late policy apply); none for practice.
    assignment_id: Mapped[int | None] = mapped_column(
        ForeignKey("assignments.id", ondelete="SET NULL"), nullable=True, index=True
    )
    code: Mapped[str] = mapped_column(Text)
    # The learner's variant of the exercise it was graded in ({name: value}, app.domain.catalog.variants): drawn when it
    # was made and kept, so a regrade or a re-run uses the same one. None: an exercise without parameters.
    params: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    status: Mapped[SubmissionStatus] = mapped_column(
        _enum(SubmissionStatus, "submission_status"), default=SubmissionStatus.queued
    )
    verdict: Mapped[Verdict | None] = mapped_column(_enum(Verdict, "verdict"), nullable=True)
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    max_score: Mapped[float] = mapped_column(Float, default=0.0)
    stdout: Mapped[str] = mapped_column(Text, default="")
    stderr: Mapped[str] = mapped_column(Text, default="")
    message: Mapped[str] = mapped_column(Text, default="")
    device: Mapped[str] = mapped_column(String(200), default="")
    sandbox: Mapped[str] = mapped_column(String(32), default="")
    runtime_ms: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # What the hidden tests measured (runner/measure.py, checked by worker.grading.jobdir); none before 0014.
    measurements: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    dispatched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    user: Mapped[User | None] = relationship(back_populates="submissions")
    exercise_version: Mapped[ExerciseVersion] = relationship()
    tests: Mapped[list[TestResult]] = relationship(
        back_populates="submission", order_by="TestResult.position", cascade="all, delete-orphan"
    )


class TestResult(Base):
    __tablename__ = "test_results"
    __test__ = False  # not a pytest test class

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    submission_id: Mapped[str] = mapped_column(ForeignKey("submissions.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(300))
    outcome: Mapped[str] = mapped_column(String(16))
    message: Mapped[str] = mapped_column(Text, default="")
    # The framework's own words behind ``message`` (runner.feedback), for a learner who opens "details".
    details: Mapped[str] = mapped_column(Text, default="", server_default="")
    points: Mapped[float] = mapped_column(Float, default=0.0)
    max_points: Mapped[float] = mapped_column(Float, default=0.0)

    submission: Mapped[Submission] = relationship(back_populates="tests")


class ExerciseCheck(Base):
    """One background run of ``worker.grading.bankcheck.check_exercise`` on a version; ``lines`` grows as it runs."""

    __tablename__ = "exercise_checks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    exercise_version_id: Mapped[int] = mapped_column(ForeignKey("exercise_versions.id", ondelete="CASCADE"), index=True)
    status: Mapped[str] = mapped_column(String(16), default="queued")  # queued, running, passed, failed, error
    total: Mapped[int] = mapped_column(Integer, default=0)
    lines: Mapped[list[str]] = mapped_column(JSON, default=list)
    problems: Mapped[list[str]] = mapped_column(JSON, default=list)
    requested_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    dispatched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    exercise_version: Mapped[ExerciseVersion] = relationship()


class Regrade(Base):
    """Staff asked for some submissions of an exercise to be graded again against ``target_version``."""

    __tablename__ = "regrades"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    exercise_id: Mapped[int] = mapped_column(ForeignKey("exercises.id", ondelete="CASCADE"), index=True)
    target_version_id: Mapped[int] = mapped_column(ForeignKey("exercise_versions.id", ondelete="CASCADE"))
    requested_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    target_version: Mapped[ExerciseVersion] = relationship()


class GradingRecord(Base):
    """A submission's earlier result, archived when it was regraded (newest ``archived_at`` last)."""

    __tablename__ = "grading_history"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    submission_id: Mapped[str] = mapped_column(ForeignKey("submissions.id", ondelete="CASCADE"), index=True)
    exercise_version_id: Mapped[int] = mapped_column(ForeignKey("exercise_versions.id"))
    regrade_id: Mapped[int | None] = mapped_column(
        ForeignKey("regrades.id", ondelete="SET NULL"), nullable=True, index=True
    )
    status: Mapped[str] = mapped_column(String(32))
    verdict: Mapped[str | None] = mapped_column(String(32), nullable=True)
    score: Mapped[float | None] = mapped_column(Float, nullable=True)
    max_score: Mapped[float] = mapped_column(Float)
    tests: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    message: Mapped[str] = mapped_column(Text, default="")
    runtime_ms: Mapped[int | None] = mapped_column(Integer, nullable=True)
    graded_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    archived_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    exercise_version: Mapped[ExerciseVersion] = relationship()


class WorkerBeat(Base):
    """The latest sign of life of one grading process (a Celery worker or the embedded server)."""

    __tablename__ = "worker_heartbeats"

    name: Mapped[str] = mapped_column(String(200), primary_key=True)  # e.g. celery@host or embedded@host:pid
    queues: Mapped[list[str]] = mapped_column(JSON, default=list)
    hostname: Mapped[str] = mapped_column(String(200), default="")
    pid: Mapped[int] = mapped_column(Integer, default=0)
    sandbox: Mapped[str] = mapped_column(String(32), default="")
    busy: Mapped[int] = mapped_column(Integer, default=0)  # gradings in progress at the last beat
    redispatched: Mapped[int] = mapped_column(Integer, default=0)  # sweeper re-dispatches since it started
    # What it keeps warm at the last beat, per kind (worker.grading.sandbox.warm_status): slots, hits, misses by
    # reason, memory, why a kind is cold. None before it first beat with warm pools.
    warm: Mapped[list[dict[str, Any]] | None] = mapped_column(JSON, nullable=True)
    # Its GPU slots at the last beat (worker.grading.sandbox.gpu_status: ids, per_job, failed id -> why); None: none.
    gpus: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    stopped_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class RevokedSession(Base):
    """A logged-out session's nonce, refused by every API process until its cookie would have expired."""

    __tablename__ = "revoked_sessions"

    nonce: Mapped[str] = mapped_column(String(64), primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


class ApiToken(Base):
    """A personal access token of the API (``app.domain.accounts.tokens``): only its hash and a short prefix are
    kept."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    prefix: Mapped[str] = mapped_column(String(16))  # the token's first characters, to tell tokens apart
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)  # SHA-256 hex of the whole token
    scopes: Mapped[list[str]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    user: Mapped[User] = relationship()


# --- courses and assignments (app.domain.courses.membership, app.domain.courses.assignments)
# -----------------------------------


class CourseRole(enum.StrEnum):
    """A member's role in one course; site roles (``Role``) stay as they are (an admin may do anything)."""

    instructor = "instructor"  # edits the course, its assignments and the bank
    ta = "ta"  # grades and reviews, grants extensions; does not edit the bank
    learner = "learner"


COURSE_STAFF = frozenset({CourseRole.instructor, CourseRole.ta})  # the course roles that see and grade its work


class Course(Base):
    """A course: staff, enrolled learners and dated assignments. ``is_practice`` is the open catalogue course."""

    __tablename__ = "courses"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    slug: Mapped[str] = mapped_column(String(64), unique=True, index=True)
    title: Mapped[str] = mapped_column(String(200))
    is_practice: Mapped[bool] = mapped_column(default=False)
    invite_token: Mapped[str | None] = mapped_column(String(64), unique=True, nullable=True)
    term: Mapped[str] = mapped_column(String(64), default="", server_default="")  # "Fall 2026": shown by the title
    # Archived: read-only for everyone (app.domain.courses.lifecycle); learners still read their grades.
    archived_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    # The course this one was copied from (next term from this one); no foreign key: the old one may be deleted.
    copied_from_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    members: Mapped[list[CourseMember]] = relationship(back_populates="course", cascade="all, delete-orphan")
    assignments: Mapped[list[Assignment]] = relationship(
        back_populates="course", order_by="Assignment.position", cascade="all, delete-orphan"
    )


class CourseMember(Base):
    """One user's membership of one course, with the role they have there and how they joined."""

    __tablename__ = "course_members"
    __table_args__ = (UniqueConstraint("course_id", "user_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("courses.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    role: Mapped[CourseRole] = mapped_column(_enum(CourseRole, "course_role"), default=CourseRole.learner)
    source: Mapped[str] = mapped_column(String(16), default="manual")  # manual, csv, invite, lti
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    course: Mapped[Course] = relationship(back_populates="members")
    user: Mapped[User] = relationship()


class Assignment(Base):
    """An ordered set of exercises with dates, a late policy, which attempt counts and attempt limits (UTC)."""

    __tablename__ = "assignments"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    course_id: Mapped[int] = mapped_column(ForeignKey("courses.id", ondelete="CASCADE"), index=True)
    title: Mapped[str] = mapped_column(String(200))
    position: Mapped[int] = mapped_column(Integer, default=0)
    is_published: Mapped[bool] = mapped_column(default=True)
    opens_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    due_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    late_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    late_credit_pct: Mapped[float] = mapped_column(Float, default=50.0)
    counts: Mapped[str] = mapped_column(String(8), default="best")  # best or last
    max_attempts: Mapped[int | None] = mapped_column(Integer, nullable=True)
    rate_burst: Mapped[int | None] = mapped_column(Integer, nullable=True)  # token bucket size
    rate_refill_s: Mapped[int | None] = mapped_column(Integer, nullable=True)  # one token back every N s
    # What the learners' practice on its exercises does meanwhile: examples_only or counted
    # (app.domain.courses.assignments).
    practice: Mapped[str] = mapped_column(String(16), default="examples_only", server_default="examples_only")
    # Whether the boards of its exercises that opt in ([leaderboard], app.domain.courses.leaderboard) show.
    leaderboard: Mapped[bool] = mapped_column(default=True, server_default=true())
    # A timed assessment (app.domain.courses.timing): each learner's clock starts when they start it, inside the
    # window, and ends after this many minutes (times their accommodation), never after the window's close.
    time_limit_min: Mapped[int | None] = mapped_column(Integer, nullable=True)
    # At a learner's end: their drafts are submitted as their final attempts (else kept for staff to read).
    submit_on_expiry: Mapped[bool] = mapped_column(default=True, server_default=true())
    access_code: Mapped[str] = mapped_column(String(100), default="", server_default="")  # needed to start, if set
    # Networks (CIDR, space-separated) a learner must be in to start and to work: a proctored room. Empty: any.
    allowed_networks: Mapped[str] = mapped_column(Text, default="", server_default="")
    # While a learner's time runs, the rest of gpulab (practice, other assignments) is closed to them.
    exam_mode: Mapped[bool] = mapped_column(default=False, server_default=false())
    # Tests' outcomes and messages stay held back (only the score shows) until the learner's window closes.
    feedback_after_close: Mapped[bool] = mapped_column(default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    course: Mapped[Course] = relationship(back_populates="assignments")
    items: Mapped[list[AssignmentItem]] = relationship(
        back_populates="assignment", order_by="AssignmentItem.position", cascade="all, delete-orphan"
    )


class AssignmentItem(Base):
    """One exercise (or quiz) of an assignment, with its weight in the assignment's grade."""

    __tablename__ = "assignment_items"
    __table_args__ = (UniqueConstraint("assignment_id", "exercise_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignments.id", ondelete="CASCADE"), index=True)
    exercise_id: Mapped[int] = mapped_column(ForeignKey("exercises.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer, default=0)
    weight: Mapped[float] = mapped_column(Float, default=1.0)

    assignment: Mapped[Assignment] = relationship(back_populates="items")
    exercise: Mapped[Exercise] = relationship()


class Extension(Base):
    """New dates for one learner on one assignment: who granted them and why. The newest unrevoked one counts."""

    __tablename__ = "extensions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignments.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    # None: the assignment's own dates (an extension that only gives time on a timed assessment).
    due_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    late_until: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    extra_attempts: Mapped[int] = mapped_column(Integer, default=0)
    # Accommodations on a timed assessment: its time limit times ``time_multiplier``, plus ``extra_minutes``.
    extra_minutes: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    time_multiplier: Mapped[float] = mapped_column(Float, default=1.0, server_default="1")
    reason: Mapped[str] = mapped_column(Text, default="")
    granted_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    revoked_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)

    user: Mapped[User] = relationship(foreign_keys=[user_id])
    granted_by: Mapped[User | None] = relationship(foreign_keys=[granted_by_id])


class GradeOverride(Base):
    """A staff override of one gradebook cell (learner x assignment item), with a comment; reverting keeps the row."""

    __tablename__ = "grade_overrides"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    item_id: Mapped[int] = mapped_column(ForeignKey("assignment_items.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    score_pct: Mapped[float] = mapped_column(Float)  # 0..100 of the item's points
    comment: Mapped[str] = mapped_column(Text, default="")
    created_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    reverted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    reverted_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)


# --- LTI 1.3 (app.domain.lti) ---------------------------------------------------------------------------------


class LtiPlatform(Base):
    """A learning platform (Moodle, Canvas...) registered to launch gpulab: one OAuth client of one issuer."""

    __tablename__ = "lti_platforms"
    __table_args__ = (UniqueConstraint("issuer", "client_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    issuer: Mapped[str] = mapped_column(String(255))
    client_id: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(200), default="")
    auth_login_url: Mapped[str] = mapped_column(String(1024))  # the OIDC authorisation endpoint
    auth_token_url: Mapped[str] = mapped_column(String(1024))  # OAuth 2 token endpoint (AGS, NRPS)
    jwks_url: Mapped[str] = mapped_column(String(1024))
    audience: Mapped[str | None] = mapped_column(String(1024), nullable=True)  # token aud, when not the token URL
    deployment_ids: Mapped[list[str]] = mapped_column(JSON, default=list)
    # Opt-in: a verified launch from a deployment not listed adds it (app.domain.lti.launch).
    accept_new_deployments: Mapped[bool] = mapped_column(default=False, server_default=false())
    # Deployments whose verified launches were refused, for the admin to accept: [{"id", "first_at", "last_at",
    # "launches"}], newest last (app.domain.lti.platforms.note_refused).
    refused_deployments: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list, server_default="[]")
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class LtiToolKey(Base):
    """One of gpulab's own signing keys; the newest unretired one signs, retired ones stay published a while."""

    __tablename__ = "lti_tool_keys"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kid: Mapped[str] = mapped_column(String(64), unique=True)
    private_pem: Mapped[str] = mapped_column(Text)
    public_jwk: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    retired_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


class LtiNonce(Base):
    """A launch nonce already used with a platform: the same id_token is refused until it has expired."""

    __tablename__ = "lti_nonces"

    platform_id: Mapped[int] = mapped_column(ForeignKey("lti_platforms.id", ondelete="CASCADE"), primary_key=True)
    nonce: Mapped[str] = mapped_column(String(255), primary_key=True)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


class LtiUser(Base):
    """A platform's user (its ``sub``) and the gpulab account launches from that platform sign in."""

    __tablename__ = "lti_users"
    __table_args__ = (UniqueConstraint("platform_id", "sub"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    platform_id: Mapped[int] = mapped_column(ForeignKey("lti_platforms.id", ondelete="CASCADE"))
    sub: Mapped[str] = mapped_column(String(255))
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    user: Mapped[User] = relationship()


class LtiContext(Base):
    """A platform's course (context ids are unique within a deployment) and the gpulab course it became."""

    __tablename__ = "lti_contexts"
    __table_args__ = (UniqueConstraint("platform_id", "deployment_id", "context_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    platform_id: Mapped[int] = mapped_column(ForeignKey("lti_platforms.id", ondelete="CASCADE"))
    deployment_id: Mapped[str] = mapped_column(String(255))
    context_id: Mapped[str] = mapped_column(String(255))
    course_id: Mapped[int] = mapped_column(ForeignKey("courses.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    # NRPS: the context's memberships service (``context_memberships_url`` of the newest launch that gave one).
    memberships_url: Mapped[str | None] = mapped_column(String(1024), nullable=True)

    course: Mapped[Course] = relationship()


class LtiLink(Base):
    """A resource link placed in a platform course: what it opens in gpulab and its gradebook column (AGS)."""

    __tablename__ = "lti_links"
    __table_args__ = (UniqueConstraint("platform_id", "deployment_id", "resource_link_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    platform_id: Mapped[int] = mapped_column(ForeignKey("lti_platforms.id", ondelete="CASCADE"))
    deployment_id: Mapped[str] = mapped_column(String(255))
    resource_link_id: Mapped[str] = mapped_column(String(255))
    title: Mapped[str] = mapped_column(String(200), default="")
    assignment_id: Mapped[int | None] = mapped_column(
        ForeignKey("assignments.id", ondelete="SET NULL"), nullable=True, index=True
    )
    exercise_id: Mapped[int | None] = mapped_column(
        ForeignKey("exercises.id", ondelete="SET NULL"), nullable=True, index=True
    )
    lineitem_url: Mapped[str | None] = mapped_column(String(1024), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    assignment: Mapped[Assignment | None] = relationship()
    exercise: Mapped[Exercise | None] = relationship()


class LtiScoreOutbox(Base):
    """A score gpulab owes a platform's gradebook (AGS): kept until the platform took it, retried with back-off."""

    __tablename__ = "lti_score_outbox"
    __table_args__ = (
        # At most one unsent row per link and learner, even when two gradings settle at once.
        Index(
            "uq_lti_score_outbox_pending", "link_id", "user_id", unique=True,
            postgresql_where=text("sent_at IS NULL"), sqlite_where=text("sent_at IS NULL"),
        ),
    )  # fmt: skip

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    platform_id: Mapped[int] = mapped_column(ForeignKey("lti_platforms.id", ondelete="CASCADE"), index=True)
    link_id: Mapped[int] = mapped_column(ForeignKey("lti_links.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    lineitem_url: Mapped[str] = mapped_column(String(1024))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True, index=True)
    # Set when the platform refused the score for good (app.domain.lti.scores): no more tries until a retry.
    given_up_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)


# --- similarity checks (app.domain.review.similarity, app.domain.review.similarity_runs)
# ------------------------------------


class SimilarityRun(Base):
    """One similarity check of the counted submissions of an exercise or of an assignment's exercises (a job)."""

    __tablename__ = "similarity_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # Exactly one of the two names what was checked.
    exercise_id: Mapped[int | None] = mapped_column(
        ForeignKey("exercises.id", ondelete="CASCADE"), nullable=True, index=True
    )
    assignment_id: Mapped[int | None] = mapped_column(
        ForeignKey("assignments.id", ondelete="CASCADE"), nullable=True, index=True
    )
    status: Mapped[str] = mapped_column(String(16), default="queued")  # queued, running, done, failed
    params: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    submissions: Mapped[int] = mapped_column(Integer, default=0)  # how many were compared
    pairs_found: Mapped[int] = mapped_column(Integer, default=0)  # above the display threshold, before the cap
    clusters: Mapped[list[list[str]]] = mapped_column(JSON, default=list)  # submission ids, three or more each
    requested_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    heartbeat_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    dispatched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)

    requested_by: Mapped[User | None] = relationship()
    exercise: Mapped[Exercise | None] = relationship()
    assignment: Mapped[Assignment | None] = relationship()
    pairs: Mapped[list[SimilarityPair]] = relationship(
        back_populates="run", order_by="SimilarityPair.rank", cascade="all, delete-orphan"
    )


class SimilarityPair(Base):
    """Two submissions of one exercise a run found similar: scores and the matched fragments (character slices)."""

    __tablename__ = "similarity_pairs"
    __table_args__ = (UniqueConstraint("run_id", "rank"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("similarity_runs.id", ondelete="CASCADE"), index=True)
    rank: Mapped[int] = mapped_column(Integer)  # 1 is the most similar
    exercise_id: Mapped[int] = mapped_column(ForeignKey("exercises.id", ondelete="CASCADE"))
    submission_a_id: Mapped[str] = mapped_column(ForeignKey("submissions.id", ondelete="CASCADE"), index=True)
    submission_b_id: Mapped[str] = mapped_column(ForeignKey("submissions.id", ondelete="CASCADE"), index=True)
    score: Mapped[float] = mapped_column(Float)
    share_a: Mapped[float] = mapped_column(Float)  # of a's fingerprinted tokens, the share found in b
    share_b: Mapped[float] = mapped_column(Float)
    tokens: Mapped[int] = mapped_column(Integer)
    fragments: Mapped[dict[str, list[list[int]]]] = mapped_column(JSON, default=dict)  # {"a": [[start, end]...], "b"}

    run: Mapped[SimilarityRun] = relationship(back_populates="pairs")
    exercise: Mapped[Exercise] = relationship()
    submission_a: Mapped[Submission] = relationship(foreign_keys=[submission_a_id])
    submission_b: Mapped[Submission] = relationship(foreign_keys=[submission_b_id])


# --- regrade requests (app.domain.review.regrade_requests) -----------------------------------------------------------


class RegradeRequestStatus(enum.StrEnum):
    open = "open"  # waiting for staff
    answered = "answered"  # staff answered; the learner may reply
    closed = "closed"  # settled; only staff reopen it


class AuditEntry(Base):
    """One change to a grade, a learner's conditions, a role, a course or an admin setting: who, when, what.

    Append-only (``app.domain.audit``; the migration refuses UPDATE and DELETE on the table). People are kept by id
    (``actor_id``, ``subject_id``), never by name or e-mail, and ``before``/``after`` hold no personal data, so an
    erased person's entries stay, readable as "erased user", without holding anything of them. ``course_id`` (no
    foreign key: nothing cascades into this table) says whose staff may read it; None: the site's (admins only).
    """

    __tablename__ = "audit_entries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, index=True)
    actor_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    course_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)
    action: Mapped[str] = mapped_column(String(64), index=True)
    subject_id: Mapped[int | None] = mapped_column(Integer, nullable=True, index=True)  # the person it concerns
    target: Mapped[str] = mapped_column(String(300), default="")  # what it changed: "assignment 12", "course 3"
    before: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    after: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)


# Append-only in the database itself, whatever code runs (migration 0024 creates the same; these cover create_all).
_AUDIT_REFUSAL = "audit entries are append-only"
event.listen(
    AuditEntry.__table__,
    "after_create",
    DDL(
        "CREATE OR REPLACE FUNCTION gpulab_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS "
        f"$$ BEGIN RAISE EXCEPTION '{_AUDIT_REFUSAL}'; END $$; "
        "CREATE TRIGGER audit_entries_append_only BEFORE UPDATE OR DELETE ON audit_entries "
        "FOR EACH ROW EXECUTE FUNCTION gpulab_audit_append_only()"
    ).execute_if(dialect="postgresql"),
)
for _event in ("UPDATE", "DELETE"):
    event.listen(
        AuditEntry.__table__,
        "after_create",
        DDL(
            f"CREATE TRIGGER audit_entries_no_{_event.lower()} BEFORE {_event} ON audit_entries "
            f"BEGIN SELECT RAISE(ABORT, '{_AUDIT_REFUSAL}'); END"
        ).execute_if(dialect="sqlite"),
    )


class TimedAttempt(Base):
    """A learner's run at a timed assignment: when their clock started and when it ends (fixed at the start)."""

    __tablename__ = "timed_attempts"
    __table_args__ = (UniqueConstraint("assignment_id", "user_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    assignment_id: Mapped[int] = mapped_column(ForeignKey("assignments.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    ends_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)
    started_from: Mapped[str] = mapped_column(String(64), default="")  # the client address it started from
    # Set once the end was handled (drafts submitted or kept): the sweeper's mark, so it happens once.
    closed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True, index=True)
    # The submissions the end made from the learner's drafts, by exercise slug (shown to them and to staff).
    submitted: Mapped[dict[str, str] | None] = mapped_column(JSON, nullable=True)


class Draft(Base):
    """A learner's unsubmitted work on one item (learner x exercise x assignment or practice): code or quiz answers.

    Never an attempt. ``revision`` counts the saves: a save names the revision it started from, so two tabs never
    overwrite each other silently (``app.domain.courses.drafts``).
    """

    __tablename__ = "drafts"
    # assignment_key: the assignment's id, 0 for practice (a unique constraint treats NULLs as distinct).
    __table_args__ = (UniqueConstraint("user_id", "exercise_id", "assignment_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    exercise_id: Mapped[int] = mapped_column(ForeignKey("exercises.id", ondelete="CASCADE"), index=True)
    assignment_id: Mapped[int | None] = mapped_column(
        ForeignKey("assignments.id", ondelete="CASCADE"), nullable=True, index=True
    )
    assignment_key: Mapped[int] = mapped_column(Integer, default=0)
    code: Mapped[str | None] = mapped_column(Text, nullable=True)  # a code exercise's editor text
    answers: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # a quiz's answers, as submitted
    revision: Mapped[int] = mapped_column(Integer, default=1)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class RegradeRequest(Base):
    """A learner's request that staff look again at one graded item (learner x exercise x assignment or practice)."""

    __tablename__ = "regrade_requests"
    # One request per item, ever: asking again means staff reopened it (assignment_key: the assignment's id, 0 for
    # practice, because a unique constraint treats NULLs as distinct).
    __table_args__ = (UniqueConstraint("user_id", "exercise_id", "assignment_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    exercise_id: Mapped[int] = mapped_column(ForeignKey("exercises.id", ondelete="CASCADE"), index=True)
    assignment_id: Mapped[int | None] = mapped_column(
        ForeignKey("assignments.id", ondelete="CASCADE"), nullable=True, index=True
    )
    assignment_key: Mapped[int] = mapped_column(Integer, default=0)
    submission_id: Mapped[str] = mapped_column(ForeignKey("submissions.id", ondelete="CASCADE"), index=True)
    status: Mapped[RegradeRequestStatus] = mapped_column(
        _enum(RegradeRequestStatus, "regrade_request_status"), default=RegradeRequestStatus.open, index=True
    )
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    user: Mapped[User] = relationship(foreign_keys=[user_id])
    exercise: Mapped[Exercise] = relationship()
    submission: Mapped[Submission] = relationship()
    messages: Mapped[list[RegradeMessage]] = relationship(
        back_populates="request", order_by="RegradeMessage.id", cascade="all, delete-orphan"
    )


class RegradeMessage(Base):
    """One message of a request's thread and what it did: ask, reply, comment, adjust, rerun, close or reopen."""

    __tablename__ = "regrade_messages"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    request_id: Mapped[int] = mapped_column(ForeignKey("regrade_requests.id", ondelete="CASCADE"), index=True)
    author_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    action: Mapped[str] = mapped_column(String(16))
    body: Mapped[str] = mapped_column(Text, default="")
    score_pct: Mapped[float | None] = mapped_column(Float, nullable=True)  # adjust: the new score, 0..100
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    request: Mapped[RegradeRequest] = relationship(back_populates="messages")
    author: Mapped[User | None] = relationship()


# --- manual grading (app.domain.review.staff_grading) ---------------------------------------------------------------


class ManualGrade(Base):
    """Staff's grade of one answer (a quiz text answer, or a code submission) against its rubric; released or not."""

    __tablename__ = "manual_grades"
    __table_args__ = (UniqueConstraint("submission_id", "question"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    submission_id: Mapped[str] = mapped_column(ForeignKey("submissions.id", ondelete="CASCADE"), index=True)
    exercise_id: Mapped[int] = mapped_column(ForeignKey("exercises.id", ondelete="CASCADE"), index=True)
    question: Mapped[str] = mapped_column(String(64))  # the quiz question's id
    checked: Mapped[list[str]] = mapped_column(JSON, default=list)  # the rubric item ids that apply
    comment: Mapped[str] = mapped_column(Text, default="")
    line_comments: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)  # code: {"line", "text"}
    points: Mapped[float | None] = mapped_column(Float, nullable=True)  # None until graded
    max_points: Mapped[float] = mapped_column(Float, default=0.0)
    revision: Mapped[int] = mapped_column(Integer, default=0)  # bumped by every save: two graders see each other
    graded_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"), nullable=True)
    graded_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    released_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)

    submission: Mapped[Submission] = relationship()
    graded_by: Mapped[User | None] = relationship()


def in_archived_course(assignment_id: Any) -> ColumnElement[bool]:
    """Return a SQL condition: the assignment id in ``assignment_id`` belongs to an archived course (frozen work)."""
    archived = (
        select(Assignment.id).join(Course, Course.id == Assignment.course_id).where(Course.archived_at.is_not(None))
    )
    return assignment_id.in_(archived)
