"""Routes for nodes: everyone sees them and who uses which GPU; admins register new ones."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from nanum.server.auth import AdminDep, CallerDep, Context
from nanum.server.inputs import KnownQuery
from nanum.server.schemas import NodeDetail, NodeIn, NodeOut, NodeReason, NodeSet, TokenOut
from nanum.server.services import accounts, fleet, inventory, nodes

router = APIRouter(prefix="/nodes", tags=["nodes"], route_class=KnownQuery)


@router.get("")
def list_nodes(ctx: Context, _: CallerDep) -> list[NodeOut]:
    return nodes.list_nodes(ctx)


@router.get("/{name}")
def get_node(name: str, ctx: Context, _: CallerDep) -> NodeDetail:
    """One node as `GET /nodes` shows it, and its history: drains, resumes and removals with their reasons, GPUs
    taken out of service with the evidence, owner, label and model changes."""
    return nodes.node_detail(ctx, name)


@router.post("", status_code=201)
def add_node(body: NodeIn, ctx: Context, _: AdminDep) -> TokenOut:
    """Register a node; the token is what `nanum agent --token-file FILE` reads on that machine."""
    return TokenOut(name=body.name, token=accounts.add_node(ctx, body.name))


@router.post("/{name}/accept")
def accept_node(name: str, ctx: Context, admin: AdminDep) -> NodeOut:
    """Schedule the GPUs the node's agent reports beyond those it was accepted with (409 when there are none)."""
    inventory.accept(ctx, name, admin.name)
    return nodes.one_node(ctx, name)


@router.patch("/{name}")
def set_node(name: str, body: NodeSet, ctx: Context, admin: AdminDep) -> NodeOut:
    """Set the node's owner lab (its jobs first; other labs borrow it while idle), labels or GPU model name."""
    fleet.set_node(ctx, name, body, admin.name)
    return nodes.one_node(ctx, name)


@router.post("/{name}/drain")
def drain_node(name: str, body: NodeReason, ctx: Context, admin: AdminDep) -> NodeOut:
    """Keep new jobs off the node; the jobs it runs finish. Lasts until the node is resumed."""
    fleet.drain(ctx, name, body.reason, admin.name)
    return nodes.one_node(ctx, name)


@router.post("/{name}/resume")
def resume_node(name: str, ctx: Context, admin: AdminDep, body: NodeReason | None = None) -> NodeOut:
    """End the node's drain and return the GPUs a health problem took out of service (409 when neither); the
    reason, if given, goes into the node's history."""
    fleet.resume(ctx, name, admin.name, body.reason if body is not None else None)
    return nodes.one_node(ctx, name)


@router.delete("/{name}", status_code=204)
def remove_node(name: str, ctx: Context, admin: AdminDep,
                reason: Annotated[str | None, Query(max_length=500)] = None) -> None:
    """Forget the node; its agent's token stops working (409 while jobs run there). The history under its name
    keeps the reason, if given."""
    fleet.remove(ctx, name, admin.name, reason)
