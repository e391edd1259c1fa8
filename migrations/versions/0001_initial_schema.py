"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "exercises",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("slug", sa.String(length=64), nullable=False),
        sa.Column("current_version_id", sa.Integer(), nullable=True),
        sa.Column("is_published", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_exercises")),
    )
    with op.batch_alter_table("exercises", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_exercises_slug"), ["slug"], unique=True)

    op.create_table(
        "users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("email", sa.String(length=320), nullable=False),
        sa.Column("password_hash", sa.String(length=255), nullable=False),
        sa.Column(
            "role", sa.Enum("learner", "instructor", "admin", name="role", native_enum=False, length=32), nullable=False
        ),
        sa.Column("is_active", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_users")),
    )
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_users_email"), ["email"], unique=True)

    op.create_table(
        "exercise_versions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("exercise_id", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("content_hash", sa.String(length=64), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("topic", sa.String(length=100), nullable=False),
        sa.Column("difficulty", sa.String(length=16), nullable=False),
        sa.Column("framework", sa.String(length=16), nullable=False),
        sa.Column("queue", sa.String(length=8), nullable=False),
        sa.Column("max_score", sa.Float(), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["exercise_id"],
            ["exercises.id"],
            name=op.f("fk_exercise_versions_exercise_id_exercises"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_exercise_versions")),
        sa.UniqueConstraint("exercise_id", "number", name=op.f("uq_exercise_versions_exercise_id")),
    )
    with op.batch_alter_table("exercise_versions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_exercise_versions_exercise_id"), ["exercise_id"], unique=False)
    # exercises and exercise_versions point at each other: add this side once both tables exist.
    with op.batch_alter_table("exercises", schema=None) as batch_op:
        batch_op.create_foreign_key(
            batch_op.f("fk_exercises_current_version_id_exercise_versions"),
            "exercise_versions",
            ["current_version_id"],
            ["id"],
            ondelete="SET NULL",
        )

    op.create_table(
        "submissions",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=True),
        sa.Column("exercise_version_id", sa.Integer(), nullable=False),
        sa.Column("code", sa.Text(), nullable=False),
        sa.Column(
            "status",
            sa.Enum("queued", "running", "graded", "error", name="submission_status", native_enum=False, length=32),
            nullable=False,
        ),
        sa.Column(
            "verdict",
            sa.Enum(
                "passed",
                "failed",
                "timeout",
                "memory_limit",
                "crashed",
                "internal_error",
                name="verdict",
                native_enum=False,
                length=32,
            ),
            nullable=True,
        ),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("max_score", sa.Float(), nullable=False),
        sa.Column("stdout", sa.Text(), nullable=False),
        sa.Column("stderr", sa.Text(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("device", sa.String(length=200), nullable=False),
        sa.Column("sandbox", sa.String(length=32), nullable=False),
        sa.Column("runtime_ms", sa.Integer(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["exercise_version_id"],
            ["exercise_versions.id"],
            name=op.f("fk_submissions_exercise_version_id_exercise_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_submissions_user_id_users"), ondelete="SET NULL"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_submissions")),
    )
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_submissions_exercise_version_id"), ["exercise_version_id"], unique=False)
        batch_op.create_index("ix_submissions_status", ["status"], unique=False)
        batch_op.create_index("ix_submissions_user_created", ["user_id", "created_at"], unique=False)

    op.create_table(
        "test_results",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.String(length=32), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=300), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("points", sa.Float(), nullable=False),
        sa.Column("max_points", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submissions.id"],
            name=op.f("fk_test_results_submission_id_submissions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_test_results")),
    )
    with op.batch_alter_table("test_results", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_test_results_submission_id"), ["submission_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("exercises", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_exercises_current_version_id_exercise_versions"), type_="foreignkey")
    with op.batch_alter_table("test_results", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_test_results_submission_id"))

    op.drop_table("test_results")
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.drop_index("ix_submissions_user_created")
        batch_op.drop_index("ix_submissions_status")
        batch_op.drop_index(batch_op.f("ix_submissions_exercise_version_id"))

    op.drop_table("submissions")
    with op.batch_alter_table("exercise_versions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_exercise_versions_exercise_id"))

    op.drop_table("exercise_versions")
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_users_email"))

    op.drop_table("users")
    with op.batch_alter_table("exercises", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_exercises_slug"))

    op.drop_table("exercises")
