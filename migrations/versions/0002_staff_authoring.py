"""staff authoring and regrade history: version source/author, checks, regrades, grading history, user names

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "exercise_checks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("exercise_version_id", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("lines", sa.JSON(), nullable=False),
        sa.Column("problems", sa.JSON(), nullable=False),
        sa.Column("requested_by_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["exercise_version_id"],
            ["exercise_versions.id"],
            name=op.f("fk_exercise_checks_exercise_version_id_exercise_versions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["requested_by_id"],
            ["users.id"],
            name=op.f("fk_exercise_checks_requested_by_id_users"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_exercise_checks")),
    )
    with op.batch_alter_table("exercise_checks", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_exercise_checks_exercise_version_id"), ["exercise_version_id"], unique=False
        )

    op.create_table(
        "regrades",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("exercise_id", sa.Integer(), nullable=False),
        sa.Column("target_version_id", sa.Integer(), nullable=False),
        sa.Column("requested_by_id", sa.Integer(), nullable=True),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["exercise_id"], ["exercises.id"], name=op.f("fk_regrades_exercise_id_exercises"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["requested_by_id"], ["users.id"], name=op.f("fk_regrades_requested_by_id_users"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["target_version_id"],
            ["exercise_versions.id"],
            name=op.f("fk_regrades_target_version_id_exercise_versions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_regrades")),
    )
    with op.batch_alter_table("regrades", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_regrades_exercise_id"), ["exercise_id"], unique=False)

    op.create_table(
        "grading_history",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.String(length=32), nullable=False),
        sa.Column("exercise_version_id", sa.Integer(), nullable=False),
        sa.Column("regrade_id", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("verdict", sa.String(length=32), nullable=True),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("max_score", sa.Float(), nullable=False),
        sa.Column("tests", sa.JSON(), nullable=False),
        sa.Column("message", sa.Text(), nullable=False),
        sa.Column("runtime_ms", sa.Integer(), nullable=True),
        sa.Column("graded_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("archived_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["exercise_version_id"],
            ["exercise_versions.id"],
            name=op.f("fk_grading_history_exercise_version_id_exercise_versions"),
        ),
        sa.ForeignKeyConstraint(
            ["regrade_id"], ["regrades.id"], name=op.f("fk_grading_history_regrade_id_regrades"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submissions.id"],
            name=op.f("fk_grading_history_submission_id_submissions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_grading_history")),
    )
    with op.batch_alter_table("grading_history", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_grading_history_regrade_id"), ["regrade_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_grading_history_submission_id"), ["submission_id"], unique=False)

    with op.batch_alter_table("exercise_versions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("source", sa.String(length=16), server_default="bank", nullable=False))
        batch_op.add_column(sa.Column("created_by_id", sa.Integer(), nullable=True))
        batch_op.create_foreign_key(
            batch_op.f("fk_exercise_versions_created_by_id_users"),
            "users",
            ["created_by_id"],
            ["id"],
            ondelete="SET NULL",
        )

    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.add_column(sa.Column("name", sa.String(length=200), server_default="", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("name")

    with op.batch_alter_table("exercise_versions", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_exercise_versions_created_by_id_users"), type_="foreignkey")
        batch_op.drop_column("created_by_id")
        batch_op.drop_column("source")

    with op.batch_alter_table("grading_history", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_grading_history_submission_id"))
        batch_op.drop_index(batch_op.f("ix_grading_history_regrade_id"))

    op.drop_table("grading_history")
    with op.batch_alter_table("regrades", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_regrades_exercise_id"))

    op.drop_table("regrades")
    with op.batch_alter_table("exercise_checks", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_exercise_checks_exercise_version_id"))

    op.drop_table("exercise_checks")
