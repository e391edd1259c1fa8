"""test result details: the framework's own words behind a failed test's message, behind a disclosure

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Empty for results graded before: their messages held any raw text themselves.
    with op.batch_alter_table("test_results", schema=None) as batch_op:
        batch_op.add_column(sa.Column("details", sa.Text(), server_default="", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("test_results", schema=None) as batch_op:
        batch_op.drop_column("details")
