"""courses: members with course roles, dated assignments of exercises, extensions, gradebook overrides

The practice course (slug ``practice``: the open catalogue every logged-in user sees, as before courses) is
created here, so existing installs keep today's behaviour; deleting it closes the catalogue.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "courses",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("slug", sa.String(length=64), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("is_practice", sa.Boolean(), nullable=False),
        sa.Column("invite_token", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_courses")),
        sa.UniqueConstraint("invite_token", name=op.f("uq_courses_invite_token")),
    )
    with op.batch_alter_table("courses", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_courses_slug"), ["slug"], unique=True)
    courses = sa.table(
        "courses", sa.column("slug", sa.String), sa.column("title", sa.String), sa.column("is_practice", sa.Boolean),
        sa.column("created_at", sa.DateTime(timezone=True)),
    )  # fmt: skip
    op.bulk_insert(
        courses, [{"slug": "practice", "title": "Practice", "is_practice": True, "created_at": datetime.now(UTC)}]
    )

    op.create_table(
        "assignments",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("course_id", sa.Integer(), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("is_published", sa.Boolean(), nullable=False),
        sa.Column("opens_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("late_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("late_credit_pct", sa.Float(), nullable=False),
        sa.Column("counts", sa.String(length=8), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=True),
        sa.Column("rate_burst", sa.Integer(), nullable=True),
        sa.Column("rate_refill_s", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["course_id"], ["courses.id"], name=op.f("fk_assignments_course_id_courses"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_assignments")),
    )
    with op.batch_alter_table("assignments", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_assignments_course_id"), ["course_id"], unique=False)

    op.create_table(
        "course_members",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("course_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column(
            "role",
            sa.Enum("instructor", "ta", "learner", name="course_role", native_enum=False, length=32),
            nullable=False,
        ),
        sa.Column("source", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["course_id"], ["courses.id"], name=op.f("fk_course_members_course_id_courses"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_course_members_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_course_members")),
        sa.UniqueConstraint("course_id", "user_id", name=op.f("uq_course_members_course_id")),
    )
    with op.batch_alter_table("course_members", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_course_members_course_id"), ["course_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_course_members_user_id"), ["user_id"], unique=False)

    op.create_table(
        "assignment_items",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("assignment_id", sa.Integer(), nullable=False),
        sa.Column("exercise_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(
            ["assignment_id"],
            ["assignments.id"],
            name=op.f("fk_assignment_items_assignment_id_assignments"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["exercise_id"],
            ["exercises.id"],
            name=op.f("fk_assignment_items_exercise_id_exercises"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_assignment_items")),
        sa.UniqueConstraint("assignment_id", "exercise_id", name=op.f("uq_assignment_items_assignment_id")),
    )
    with op.batch_alter_table("assignment_items", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_assignment_items_assignment_id"), ["assignment_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_assignment_items_exercise_id"), ["exercise_id"], unique=False)

    op.create_table(
        "extensions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("assignment_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("late_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("extra_attempts", sa.Integer(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("granted_by_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_by_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["assignment_id"],
            ["assignments.id"],
            name=op.f("fk_extensions_assignment_id_assignments"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["granted_by_id"], ["users.id"], name=op.f("fk_extensions_granted_by_id_users"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["revoked_by_id"], ["users.id"], name=op.f("fk_extensions_revoked_by_id_users"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_extensions_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_extensions")),
    )
    with op.batch_alter_table("extensions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_extensions_assignment_id"), ["assignment_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_extensions_user_id"), ["user_id"], unique=False)

    op.create_table(
        "grade_overrides",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("item_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("score_pct", sa.Float(), nullable=False),
        sa.Column("comment", sa.Text(), nullable=False),
        sa.Column("created_by_id", sa.Integer(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reverted_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reverted_by_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["created_by_id"], ["users.id"], name=op.f("fk_grade_overrides_created_by_id_users"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["item_id"],
            ["assignment_items.id"],
            name=op.f("fk_grade_overrides_item_id_assignment_items"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["reverted_by_id"], ["users.id"], name=op.f("fk_grade_overrides_reverted_by_id_users"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_grade_overrides_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_grade_overrides")),
    )
    with op.batch_alter_table("grade_overrides", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_grade_overrides_item_id"), ["item_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_grade_overrides_user_id"), ["user_id"], unique=False)

    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("assignment_id", sa.Integer(), nullable=True))
        batch_op.create_index(batch_op.f("ix_submissions_assignment_id"), ["assignment_id"], unique=False)
        batch_op.create_foreign_key(
            batch_op.f("fk_submissions_assignment_id_assignments"),
            "assignments",
            ["assignment_id"],
            ["id"],
            ondelete="SET NULL",
        )


def downgrade() -> None:
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.drop_constraint(batch_op.f("fk_submissions_assignment_id_assignments"), type_="foreignkey")
        batch_op.drop_index(batch_op.f("ix_submissions_assignment_id"))
        batch_op.drop_column("assignment_id")

    with op.batch_alter_table("grade_overrides", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_grade_overrides_user_id"))
        batch_op.drop_index(batch_op.f("ix_grade_overrides_item_id"))

    op.drop_table("grade_overrides")
    with op.batch_alter_table("extensions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_extensions_user_id"))
        batch_op.drop_index(batch_op.f("ix_extensions_assignment_id"))

    op.drop_table("extensions")
    with op.batch_alter_table("assignment_items", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_assignment_items_exercise_id"))
        batch_op.drop_index(batch_op.f("ix_assignment_items_assignment_id"))

    op.drop_table("assignment_items")
    with op.batch_alter_table("course_members", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_course_members_user_id"))
        batch_op.drop_index(batch_op.f("ix_course_members_course_id"))

    op.drop_table("course_members")
    with op.batch_alter_table("assignments", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_assignments_course_id"))

    op.drop_table("assignments")
    with op.batch_alter_table("courses", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_courses_slug"))

    op.drop_table("courses")
