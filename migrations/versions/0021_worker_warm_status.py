"""worker warm status: what each grading process keeps warm, per kind (slots, hits, misses by reason, why cold)

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-06
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Written with every heartbeat (app.jobs.heartbeat); empty until a process that has warm pools beats.
    with op.batch_alter_table("worker_heartbeats", schema=None) as batch_op:
        batch_op.add_column(sa.Column("warm", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("worker_heartbeats", schema=None) as batch_op:
        batch_op.drop_column("warm")
