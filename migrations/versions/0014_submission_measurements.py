"""submission measurements: what a measured-outcome exercise's hidden tests measured, beside their targets

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("submissions", sa.Column("measurements", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("submissions", "measurements")
