"""regrade requests: a learner's request on a graded item and its thread

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "regrade_requests",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("exercise_id", sa.Integer(), nullable=False),
        sa.Column("assignment_id", sa.Integer(), nullable=True),
        sa.Column("assignment_key", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.String(length=32), nullable=False),
        sa.Column(
            "status",
            sa.Enum("open", "answered", "closed", name="regrade_request_status", native_enum=False, length=32),
            nullable=False,
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["assignment_id"],
            ["assignments.id"],
            name=op.f("fk_regrade_requests_assignment_id_assignments"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["exercise_id"],
            ["exercises.id"],
            name=op.f("fk_regrade_requests_exercise_id_exercises"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submissions.id"],
            name=op.f("fk_regrade_requests_submission_id_submissions"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_regrade_requests_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_regrade_requests")),
        sa.UniqueConstraint("user_id", "exercise_id", "assignment_key", name=op.f("uq_regrade_requests_user_id")),
    )
    with op.batch_alter_table("regrade_requests", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_regrade_requests_assignment_id"), ["assignment_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_regrade_requests_exercise_id"), ["exercise_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_regrade_requests_status"), ["status"], unique=False)
        batch_op.create_index(batch_op.f("ix_regrade_requests_submission_id"), ["submission_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_regrade_requests_user_id"), ["user_id"], unique=False)

    op.create_table(
        "regrade_messages",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("request_id", sa.Integer(), nullable=False),
        sa.Column("author_id", sa.Integer(), nullable=True),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("body", sa.Text(), nullable=False),
        sa.Column("score_pct", sa.Float(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["author_id"], ["users.id"], name=op.f("fk_regrade_messages_author_id_users"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["request_id"],
            ["regrade_requests.id"],
            name=op.f("fk_regrade_messages_request_id_regrade_requests"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_regrade_messages")),
    )
    with op.batch_alter_table("regrade_messages", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_regrade_messages_request_id"), ["request_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("regrade_messages", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_regrade_messages_request_id"))

    op.drop_table("regrade_messages")
    with op.batch_alter_table("regrade_requests", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_regrade_requests_user_id"))
        batch_op.drop_index(batch_op.f("ix_regrade_requests_submission_id"))
        batch_op.drop_index(batch_op.f("ix_regrade_requests_status"))
        batch_op.drop_index(batch_op.f("ix_regrade_requests_exercise_id"))
        batch_op.drop_index(batch_op.f("ix_regrade_requests_assignment_id"))

    op.drop_table("regrade_requests")
