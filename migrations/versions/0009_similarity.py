"""similarity checks: runs over an exercise's or an assignment's counted submissions, and the pairs they ranked

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "similarity_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("exercise_id", sa.Integer(), nullable=True),
        sa.Column("assignment_id", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("submissions", sa.Integer(), nullable=False),
        sa.Column("pairs_found", sa.Integer(), nullable=False),
        sa.Column("clusters", sa.JSON(), nullable=False),
        sa.Column("requested_by_id", sa.Integer(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["assignment_id"], ["assignments.id"], name=op.f("fk_similarity_runs_assignment_id_assignments"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["exercise_id"], ["exercises.id"], name=op.f("fk_similarity_runs_exercise_id_exercises"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["requested_by_id"], ["users.id"], name=op.f("fk_similarity_runs_requested_by_id_users"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_similarity_runs")),
    )  # fmt: skip
    with op.batch_alter_table("similarity_runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_similarity_runs_assignment_id"), ["assignment_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_similarity_runs_exercise_id"), ["exercise_id"], unique=False)

    op.create_table(
        "similarity_pairs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("exercise_id", sa.Integer(), nullable=False),
        sa.Column("submission_a_id", sa.String(length=32), nullable=False),
        sa.Column("submission_b_id", sa.String(length=32), nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("share_a", sa.Float(), nullable=False),
        sa.Column("share_b", sa.Float(), nullable=False),
        sa.Column("tokens", sa.Integer(), nullable=False),
        sa.Column("fragments", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(
            ["exercise_id"], ["exercises.id"], name=op.f("fk_similarity_pairs_exercise_id_exercises"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["similarity_runs.id"], name=op.f("fk_similarity_pairs_run_id_similarity_runs"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["submission_a_id"], ["submissions.id"], name=op.f("fk_similarity_pairs_submission_a_id_submissions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["submission_b_id"], ["submissions.id"], name=op.f("fk_similarity_pairs_submission_b_id_submissions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_similarity_pairs")),
        sa.UniqueConstraint("run_id", "rank", name=op.f("uq_similarity_pairs_run_id")),
    )  # fmt: skip
    with op.batch_alter_table("similarity_pairs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_similarity_pairs_run_id"), ["run_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_similarity_pairs_submission_a_id"), ["submission_a_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_similarity_pairs_submission_b_id"), ["submission_b_id"], unique=False)


def downgrade() -> None:
    op.drop_table("similarity_pairs")
    op.drop_table("similarity_runs")
