"""submission params: the learner's variant of a parameterised exercise, kept with each submission

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, no default: submissions made before variants existed (and those of exercises without
    # parameters) were graded in the one variant there was, which None stands for.
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.add_column(sa.Column("params", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.drop_column("params")
