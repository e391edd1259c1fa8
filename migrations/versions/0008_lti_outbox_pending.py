"""lti: at most one unsent outbox row per link and learner (a partial unique index)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PENDING = sa.text("sent_at IS NULL")


def upgrade() -> None:
    # Rows queued twice before this index existed: keep the newest unsent one per pair, as queue_score would have.
    op.execute(
        "DELETE FROM lti_score_outbox WHERE sent_at IS NULL AND id NOT IN ("
        "SELECT MAX(id) FROM lti_score_outbox WHERE sent_at IS NULL GROUP BY link_id, user_id)"
    )
    op.create_index(
        "uq_lti_score_outbox_pending", "lti_score_outbox", ["link_id", "user_id"], unique=True,
        postgresql_where=PENDING, sqlite_where=PENDING,
    )  # fmt: skip


def downgrade() -> None:
    op.drop_index("uq_lti_score_outbox_pending", table_name="lti_score_outbox")
