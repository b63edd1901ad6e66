"""Running a fleet (admin): `nanum node set` (owner lab, labels, GPU model name), `nanum node drain`, `resume` and
`remove`; and `nanum node show`, a node with its history, for everyone."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import typer

from nanum.cli.common import Command, JsonOpt, ServerOpt, TokenOpt, clean_errors, connect, fail, print_json
from nanum.cli.groups import NameArg, node_app
from nanum.cli.jobspec import parse_label

_Opt = typer.Option


def _said(node: Mapping[str, Any], json: bool) -> None:
    if json:
        print_json(node)
        return
    labels = ",".join(f"{k}={v}" for k, v in sorted((node.get("labels") or {}).items())) or "-"
    models = ",".join(sorted({str(g.get("model")) for g in node.get("gpus") or ()})) or "-"
    why = f" ({node['drain_reason']})" if node.get("drain_reason") else ""
    print(f"{node['name']}: {node['state']}{why}; owner {node.get('owner') or '-'}; labels {labels}; "
          f"GPU model {models}")


@node_app.command("set", cls=Command)
@clean_errors
def node_set(
    name: NameArg,
    lab: Annotated[str | None, _Opt("--lab", metavar="LAB", help=(
        "The lab that owns the node: its jobs come first there, other labs borrow it while idle "
        "(\"\" for the shared pool)."))] = None,
    label: Annotated[list[str] | None, _Opt("--label", metavar="K=V", help=(
        "A label jobs ask for with --constraint K=V; K= removes it; repeat."))] = None,
    model: Annotated[str | None, _Opt("--model", metavar="MODEL", help=(
        "The GPU model jobs ask for with --gpu-model, replacing what the agent reports (\"\" to undo)."))] = None,
    json: JsonOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
) -> None:
    """Set a node's owner lab, labels or GPU model name."""
    if lab is None and not label and model is None:
        fail("nothing to set; give --lab LAB, --label K=V or --model MODEL", 2)
    labels = [parse_label(x, "--label") for x in label or ()]
    with connect(server, token) as client:
        node = client.set_node(name, owner=lab, labels=labels, gpu_model=model)
    _said(node, json)


ReasonOpt = Annotated[str | None, _Opt("--reason", metavar="TEXT", help=(
    "Why, shown by `nanum nodes` and kept in the node's history (`nanum node show`)."))]
HistoryReasonOpt = Annotated[str | None, _Opt("--reason", metavar="TEXT", help=(
    "Why, kept in the node's history (`nanum node show`)."))]


@node_app.command("show", cls=Command)
@clean_errors
def node_show(name: NameArg, json: JsonOpt = False, server: ServerOpt = None, token: TokenOpt = None) -> None:
    """A node, its GPUs out of service, and its history: drains, resumes and removals with their reasons, GPUs
    taken out of service with the evidence, owner, label and model changes."""
    from nanum.cli.sharing_views import history_lines

    with connect(server, token) as client:
        node = client.node(name)
    if json:
        print_json(node)
        return
    _said(node, False)
    for g in node.get("gpus") or ():
        if g.get("health"):
            print(f"GPU {g['index']} out of service: {g['health']}")
    print("History:" if node["history"] else "History: none")
    for line in history_lines(node["history"]):
        print(f"  {line}")


@node_app.command("drain", cls=Command)
@clean_errors
def node_drain(name: NameArg, reason: ReasonOpt = None, json: JsonOpt = False, server: ServerOpt = None,
               token: TokenOpt = None) -> None:
    """Keep new jobs off a node; the jobs it runs finish (`nanum nodes` says draining, then drained)."""
    with connect(server, token) as client:
        node = client.drain_node(name, reason)
    _said(node, json)


@node_app.command("resume", cls=Command)
@clean_errors
def node_resume(name: NameArg, reason: HistoryReasonOpt = None, json: JsonOpt = False, server: ServerOpt = None,
                token: TokenOpt = None) -> None:
    """End a node's drain and return its GPUs taken out of service for health problems."""
    with connect(server, token) as client:
        node = client.resume_node(name, reason)
    _said(node, json)


@node_app.command("remove", cls=Command)
@clean_errors
def node_remove(name: NameArg, reason: HistoryReasonOpt = None, server: ServerOpt = None,
                token: TokenOpt = None) -> None:
    """Forget a node (refused while jobs run there); its agent's token stops working."""
    with connect(server, token) as client:
        client.remove_node(name, reason)
    print(f"Node {name} removed.")
