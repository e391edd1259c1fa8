"""lti: the NRPS memberships service URL of each platform context, for roster sync

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("lti_contexts", schema=None) as batch_op:
        batch_op.add_column(sa.Column("memberships_url", sa.String(length=1024), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("lti_contexts", schema=None) as batch_op:
        batch_op.drop_column("memberships_url")
