"""lti: deployments refused per platform, an opt-in to accept a registered client's new deployments, given-up scores

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-02
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Platforms registered before this keep refusing unknown deployments (the opt-in is off) and have refused none.
    with op.batch_alter_table("lti_platforms", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("accept_new_deployments", sa.Boolean(), nullable=False, server_default=sa.false())
        )
        batch_op.add_column(sa.Column("refused_deployments", sa.JSON(), nullable=False, server_default="[]"))
    # Nullable: no score was given up before this (every unsent row kept retrying).
    with op.batch_alter_table("lti_score_outbox", schema=None) as batch_op:
        batch_op.add_column(sa.Column("given_up_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("lti_score_outbox", schema=None) as batch_op:
        batch_op.drop_column("given_up_at")
    with op.batch_alter_table("lti_platforms", schema=None) as batch_op:
        batch_op.drop_column("refused_deployments")
        batch_op.drop_column("accept_new_deployments")
