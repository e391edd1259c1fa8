"""assignment leaderboard: an instructor's switch for the boards of the assignment's opted-in exercises

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # On for every assignment, existing ones included: a board shows only where an exercise's author opted in
    # ([leaderboard] in exercise.toml), and only pseudonyms to learners; the instructor turns it off.
    with op.batch_alter_table("assignments", schema=None) as batch_op:
        batch_op.add_column(sa.Column("leaderboard", sa.Boolean(), server_default=sa.true(), nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("assignments", schema=None) as batch_op:
        batch_op.drop_column("leaderboard")
