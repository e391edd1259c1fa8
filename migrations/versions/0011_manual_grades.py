"""manual grades: staff's grade of a staff-graded quiz answer against its rubric, released or not

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "manual_grades",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("submission_id", sa.String(length=32), nullable=False),
        sa.Column("exercise_id", sa.Integer(), nullable=False),
        sa.Column("question", sa.String(length=64), nullable=False),
        sa.Column("checked", sa.JSON(), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("line_comments", sa.JSON(), nullable=False),
        sa.Column("points", sa.Float(), nullable=True),
        sa.Column("max_points", sa.Float(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("graded_by_id", sa.Integer(), nullable=True),
        sa.Column("graded_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["exercise_id"], ["exercises.id"], name=op.f("fk_manual_grades_exercise_id_exercises"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["graded_by_id"], ["users.id"], name=op.f("fk_manual_grades_graded_by_id_users"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["submission_id"],
            ["submissions.id"],
            name=op.f("fk_manual_grades_submission_id_submissions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_manual_grades")),
        sa.UniqueConstraint("submission_id", "question", name=op.f("uq_manual_grades_submission_id")),
    )
    with op.batch_alter_table("manual_grades", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_manual_grades_exercise_id"), ["exercise_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_manual_grades_submission_id"), ["submission_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("manual_grades", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_manual_grades_submission_id"))
        batch_op.drop_index(batch_op.f("ix_manual_grades_exercise_id"))

    op.drop_table("manual_grades")
