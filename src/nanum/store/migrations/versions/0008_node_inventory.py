"""Accepted GPU inventories: `nodes.accepted_gpus`, the GPUs (index, uuid, model) a node was taken into service
with (recorded from its first heartbeat, replaced when an admin runs `nanum node accept`), and
`nodes.unaccepted_gpus`, the GPUs its last heartbeat reported beyond them, which are not scheduled. Nodes that
reported before keep the GPUs they have: their current inventory is recorded as accepted.

Revision ID: 0008_node_inventory
Revises: 0007_client_request_id
Create Date: 2026-12-04
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

revision = "0008_node_inventory"
down_revision = "0007_client_request_id"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("accepted_gpus", sa.JSON(none_as_null=True)))
        batch.add_column(sa.Column("unaccepted_gpus", sa.JSON(none_as_null=True)))
    nodes = sa.table("nodes", sa.column("id", sa.Integer()), sa.column("inventory", sa.JSON()),
                     sa.column("accepted_gpus", sa.JSON(none_as_null=True)))
    conn = op.get_bind()
    for node_id, inventory in conn.execute(sa.select(nodes.c.id, nodes.c.inventory)).all():
        if isinstance(inventory, str):
            inventory = json.loads(inventory)
        if inventory:
            accepted = [{k: g.get(k) for k in ("index", "uuid", "model")} for g in inventory.get("gpus", ())]
            conn.execute(nodes.update().where(nodes.c.id == node_id).values(accepted_gpus=accepted))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("unaccepted_gpus")
        batch.drop_column("accepted_gpus")
