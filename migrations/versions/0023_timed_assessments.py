"""timed assessments: an assignment's time limit, access code, networks and exam mode; accommodations; attempts

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("assignments", schema=None) as batch_op:
        batch_op.add_column(sa.Column("time_limit_min", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("submit_on_expiry", sa.Boolean(), server_default=sa.true(), nullable=False))
        batch_op.add_column(sa.Column("access_code", sa.String(length=100), server_default="", nullable=False))
        batch_op.add_column(sa.Column("allowed_networks", sa.Text(), server_default="", nullable=False))
        batch_op.add_column(sa.Column("exam_mode", sa.Boolean(), server_default=sa.false(), nullable=False))
        batch_op.add_column(sa.Column("feedback_after_close", sa.Boolean(), server_default=sa.false(), nullable=False))
    with op.batch_alter_table("extensions", schema=None) as batch_op:
        batch_op.alter_column("due_at", existing_type=sa.DateTime(timezone=True), nullable=True)
        batch_op.add_column(sa.Column("extra_minutes", sa.Integer(), server_default="0", nullable=False))
        batch_op.add_column(sa.Column("time_multiplier", sa.Float(), server_default="1", nullable=False))
    op.create_table(
        "timed_attempts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("assignment_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_from", sa.String(length=64), nullable=False),
        sa.Column("closed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("submitted", sa.JSON(), nullable=True),
        sa.ForeignKeyConstraint(["assignment_id"], ["assignments.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("assignment_id", "user_id"),
    )
    with op.batch_alter_table("timed_attempts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_timed_attempts_assignment_id"), ["assignment_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_timed_attempts_user_id"), ["user_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_timed_attempts_ends_at"), ["ends_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_timed_attempts_closed_at"), ["closed_at"], unique=False)


def downgrade() -> None:
    op.drop_table("timed_attempts")
    with op.batch_alter_table("extensions", schema=None) as batch_op:
        batch_op.drop_column("time_multiplier")
        batch_op.drop_column("extra_minutes")
    with op.batch_alter_table("assignments", schema=None) as batch_op:
        for column in ("feedback_after_close", "exam_mode", "allowed_networks", "access_code", "submit_on_expiry",
                       "time_limit_min"):  # fmt: skip
            batch_op.drop_column(column)
