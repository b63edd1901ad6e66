"""Routes for nodes: everyone sees them and who uses which GPU; admins register new ones."""

from __future__ import annotations

from fastapi import APIRouter

from nanum.server.auth import AdminDep, CallerDep, Context
from nanum.server.errors import NotFound
from nanum.server.schemas import NodeIn, NodeOut, TokenOut
from nanum.server.services import accounts, inventory, nodes

router = APIRouter(prefix="/nodes", tags=["nodes"])


@router.get("")
def list_nodes(ctx: Context, _: CallerDep) -> list[NodeOut]:
    return nodes.list_nodes(ctx)


@router.post("", status_code=201)
def add_node(body: NodeIn, ctx: Context, _: AdminDep) -> TokenOut:
    """Register a node; the token is what `nanum agent --token-file FILE` reads on that machine."""
    return TokenOut(name=body.name, token=accounts.add_node(ctx, body.name))


@router.post("/{name}/accept")
def accept_node(name: str, ctx: Context, admin: AdminDep) -> NodeOut:
    """Schedule the GPUs the node's agent reports beyond those it was accepted with (409 when there are none)."""
    inventory.accept(ctx, name, admin.name)
    found = [n for n in nodes.list_nodes(ctx) if n.name == name]
    if not found:
        raise NotFound(f"no node named {name}; `nanum nodes` lists them")
    return found[0]
