"""courses: site instructors join the practice course's staff list, keeping what they could see before the upgrade

Staff rights became per course (issue 22): practice work is read by the practice course's staff only. Before, every
site instructor read it; so that an upgrade takes nothing away, each active site instructor who holds no role in the
practice course becomes one of its instructors (source "upgrade"). Admins may remove them at /courses/practice/members.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-02
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    bind = op.get_bind()
    practice = bind.execute(sa.text("SELECT id FROM courses WHERE is_practice ORDER BY id LIMIT 1")).scalar()
    if practice is None:
        return
    instructors = bind.execute(
        sa.text(
            "SELECT id FROM users WHERE role = 'instructor' AND is_active "
            "AND id NOT IN (SELECT user_id FROM course_members WHERE course_id = :course)"
        ),
        {"course": practice},
    ).scalars()
    members = sa.table(
        "course_members",
        sa.column("course_id", sa.Integer),
        sa.column("user_id", sa.Integer),
        sa.column("role", sa.String),
        sa.column("source", sa.String),
        sa.column("created_at", sa.DateTime(timezone=True)),
    )
    now = datetime.now(UTC)
    rows = [
        {"course_id": practice, "user_id": user_id, "role": "instructor", "source": "upgrade", "created_at": now}
        for user_id in instructors
    ]
    if rows:
        op.bulk_insert(members, rows)


def downgrade() -> None:
    op.execute(sa.text("DELETE FROM course_members WHERE source = 'upgrade'"))
