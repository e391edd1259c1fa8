"""lti: the score outbox, the AGS scores gpulab owes platforms' gradebooks until they take them

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "lti_score_outbox",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("platform_id", sa.Integer(), nullable=False),
        sa.Column("link_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("lineitem_url", sa.String(length=1024), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("sent_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["link_id"], ["lti_links.id"], name=op.f("fk_lti_score_outbox_link_id_lti_links"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["platform_id"],
            ["lti_platforms.id"],
            name=op.f("fk_lti_score_outbox_platform_id_lti_platforms"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_lti_score_outbox_user_id_users"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lti_score_outbox")),
    )
    with op.batch_alter_table("lti_score_outbox", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_lti_score_outbox_link_id"), ["link_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_lti_score_outbox_next_attempt_at"), ["next_attempt_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_lti_score_outbox_platform_id"), ["platform_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_lti_score_outbox_sent_at"), ["sent_at"], unique=False)
        batch_op.create_index(batch_op.f("ix_lti_score_outbox_user_id"), ["user_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("lti_score_outbox", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_lti_score_outbox_user_id"))
        batch_op.drop_index(batch_op.f("ix_lti_score_outbox_sent_at"))
        batch_op.drop_index(batch_op.f("ix_lti_score_outbox_platform_id"))
        batch_op.drop_index(batch_op.f("ix_lti_score_outbox_next_attempt_at"))
        batch_op.drop_index(batch_op.f("ix_lti_score_outbox_link_id"))

    op.drop_table("lti_score_outbox")
