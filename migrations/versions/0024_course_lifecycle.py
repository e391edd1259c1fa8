"""audit entries (an append-only record of who changed a grade, a condition, a role, a course or a setting); a
course's term, archive time and the course it was copied from; when a person was erased

Revision ID: 0024
Revises: 0023
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

REFUSAL = "audit entries are append-only"


def upgrade() -> None:
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.add_column(sa.Column("erased_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("courses", schema=None) as batch_op:
        batch_op.add_column(sa.Column("term", sa.String(length=64), server_default="", nullable=False))
        batch_op.add_column(sa.Column("archived_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("copied_from_id", sa.Integer(), nullable=True))
    op.create_table(
        "audit_entries",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor_id", sa.Integer(), nullable=True),
        sa.Column("course_id", sa.Integer(), nullable=True),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("subject_id", sa.Integer(), nullable=True),
        sa.Column("target", sa.String(length=300), nullable=False),
        sa.Column("before", sa.JSON(), nullable=True),
        sa.Column("after", sa.JSON(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("audit_entries", schema=None) as batch_op:
        for column in ("at", "actor_id", "course_id", "action", "subject_id"):
            batch_op.create_index(batch_op.f(f"ix_audit_entries_{column}"), [column], unique=False)
    # Append-only in the database itself: no UPDATE or DELETE, whatever code runs (a restore inserts).
    if op.get_context().dialect.name == "postgresql":
        op.execute(
            "CREATE FUNCTION gpulab_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS "
            f"$$ BEGIN RAISE EXCEPTION '{REFUSAL}'; END $$"
        )
        op.execute(
            "CREATE TRIGGER audit_entries_append_only BEFORE UPDATE OR DELETE ON audit_entries "
            "FOR EACH ROW EXECUTE FUNCTION gpulab_audit_append_only()"
        )
    else:
        for event in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER audit_entries_no_{event.lower()} BEFORE {event} ON audit_entries "
                f"BEGIN SELECT RAISE(ABORT, '{REFUSAL}'); END"
            )


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS audit_entries_append_only ON audit_entries")
        op.execute("DROP FUNCTION IF EXISTS gpulab_audit_append_only()")
    op.drop_table("audit_entries")
    with op.batch_alter_table("courses", schema=None) as batch_op:
        batch_op.drop_column("copied_from_id")
        batch_op.drop_column("archived_at")
        batch_op.drop_column("term")
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("erased_at")
