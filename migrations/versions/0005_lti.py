"""lti: registered platforms, gpulab's signing keys, used nonces, and the user, context and link mappings

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "lti_platforms",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("issuer", sa.String(length=255), nullable=False),
        sa.Column("client_id", sa.String(length=255), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("auth_login_url", sa.String(length=1024), nullable=False),
        sa.Column("auth_token_url", sa.String(length=1024), nullable=False),
        sa.Column("jwks_url", sa.String(length=1024), nullable=False),
        sa.Column("audience", sa.String(length=1024), nullable=True),
        sa.Column("deployment_ids", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lti_platforms")),
        sa.UniqueConstraint("issuer", "client_id", name=op.f("uq_lti_platforms_issuer")),
    )
    op.create_table(
        "lti_tool_keys",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kid", sa.String(length=64), nullable=False),
        sa.Column("private_pem", sa.Text(), nullable=False),
        sa.Column("public_jwk", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("retired_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lti_tool_keys")),
        sa.UniqueConstraint("kid", name=op.f("uq_lti_tool_keys_kid")),
    )
    op.create_table(
        "lti_contexts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("platform_id", sa.Integer(), nullable=False),
        sa.Column("deployment_id", sa.String(length=255), nullable=False),
        sa.Column("context_id", sa.String(length=255), nullable=False),
        sa.Column("course_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["course_id"], ["courses.id"], name=op.f("fk_lti_contexts_course_id_courses"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["platform_id"],
            ["lti_platforms.id"],
            name=op.f("fk_lti_contexts_platform_id_lti_platforms"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lti_contexts")),
        sa.UniqueConstraint("platform_id", "deployment_id", "context_id", name=op.f("uq_lti_contexts_platform_id")),
    )
    with op.batch_alter_table("lti_contexts", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_lti_contexts_course_id"), ["course_id"], unique=False)

    op.create_table(
        "lti_nonces",
        sa.Column("platform_id", sa.Integer(), nullable=False),
        sa.Column("nonce", sa.String(length=255), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["platform_id"],
            ["lti_platforms.id"],
            name=op.f("fk_lti_nonces_platform_id_lti_platforms"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("platform_id", "nonce", name=op.f("pk_lti_nonces")),
    )
    with op.batch_alter_table("lti_nonces", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_lti_nonces_expires_at"), ["expires_at"], unique=False)

    op.create_table(
        "lti_users",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("platform_id", sa.Integer(), nullable=False),
        sa.Column("sub", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["platform_id"],
            ["lti_platforms.id"],
            name=op.f("fk_lti_users_platform_id_lti_platforms"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(["user_id"], ["users.id"], name=op.f("fk_lti_users_user_id_users"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lti_users")),
        sa.UniqueConstraint("platform_id", "sub", name=op.f("uq_lti_users_platform_id")),
    )
    with op.batch_alter_table("lti_users", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_lti_users_user_id"), ["user_id"], unique=False)

    op.create_table(
        "lti_links",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("platform_id", sa.Integer(), nullable=False),
        sa.Column("deployment_id", sa.String(length=255), nullable=False),
        sa.Column("resource_link_id", sa.String(length=255), nullable=False),
        sa.Column("title", sa.String(length=200), nullable=False),
        sa.Column("assignment_id", sa.Integer(), nullable=True),
        sa.Column("exercise_id", sa.Integer(), nullable=True),
        sa.Column("lineitem_url", sa.String(length=1024), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["assignment_id"],
            ["assignments.id"],
            name=op.f("fk_lti_links_assignment_id_assignments"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["exercise_id"], ["exercises.id"], name=op.f("fk_lti_links_exercise_id_exercises"), ondelete="SET NULL"
        ),
        sa.ForeignKeyConstraint(
            ["platform_id"],
            ["lti_platforms.id"],
            name=op.f("fk_lti_links_platform_id_lti_platforms"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_lti_links")),
        sa.UniqueConstraint("platform_id", "deployment_id", "resource_link_id", name=op.f("uq_lti_links_platform_id")),
    )
    with op.batch_alter_table("lti_links", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_lti_links_assignment_id"), ["assignment_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_lti_links_exercise_id"), ["exercise_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("lti_links", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_lti_links_exercise_id"))
        batch_op.drop_index(batch_op.f("ix_lti_links_assignment_id"))

    op.drop_table("lti_links")
    with op.batch_alter_table("lti_users", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_lti_users_user_id"))

    op.drop_table("lti_users")
    with op.batch_alter_table("lti_nonces", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_lti_nonces_expires_at"))

    op.drop_table("lti_nonces")
    with op.batch_alter_table("lti_contexts", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_lti_contexts_course_id"))

    op.drop_table("lti_contexts")
    op.drop_table("lti_tool_keys")
    op.drop_table("lti_platforms")
