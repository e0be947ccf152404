"""``crewlet fleet broker list|remove``: the broker's membership through a running node (FL-40, FL-147, FL-149).

- ``crewlet fleet broker list [--url U] [--token T] [--json]`` prints a node's ``GET /fleet/broker``:
  the live nodes with the kind each advertises, the metadata group's voters, and every finding.
- ``crewlet fleet broker remove NODE --confirm NODE [--force]`` and
  ``crewlet fleet broker remove --peer ID --confirm ID [--force]`` post the removal to the node; it
  forwards to a live member other than the target. The command waits the removal deadline
  (2 min 5 s) plus one minute.

The URL and token default to ``CREWLET_URL`` and ``CREWLET_API_TOKEN``. This command never opens
the broker or a store itself (FL-40).

Exit codes: 0 answered / removed; 1 the node could not be reached, answered 503, or the outcome is
unknown (read ``list`` before asking again); 2 refused (the reason code and why are printed), no
token, or a usage error.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from ._node_api import JsonFlag, Token, Url, call, clean_view, show_view

__all__ = ["app"]

app = typer.Typer(
    no_args_is_help=True, help="The broker's members: list them, remove a dead one (FL-147, FL-149)."
)


LIST_TIMEOUT = 20.0
"""Seconds ``list`` waits: the node's group read (5 s) plus a hop to the leader (5 s), with margin."""
REMOVE_TIMEOUT = 125.0 + 60.0
"""Seconds ``remove`` waits: the removal deadline (2 min 5 s) plus one minute (FL-149)."""


def _print_view(view: dict[str, Any], out: Console) -> None:
    if view.get("external"):
        out.print(f"{view['node']}: the broker is an external NATS cluster; its membership is its operator's")
        return
    group = view.get("group")
    voters = {p["peer"] for p in group["peers"]} if group else set()
    nodes = Table(title=f"nodes (asked {view['node']}, a {view['kind']})")
    for col in ("node", "peer", "kind", "roles", "voter"):
        nodes.add_column(col)
    for n in view.get("nodes", []):
        voter = ("yes" if n["peer"] in voters else "no") if group else "?"
        nodes.add_row(n["node"], n["peer"], n["kind"], ",".join(n.get("roles", [])), voter)
    out.print(nodes)
    if group:
        name = group["cluster"] or "(one server, not clustered)"
        title = f"metadata group {name} (leader {group['leader'] or 'none'}, as {view['group_from']} sees it)"
        table = Table(title=title)
        for col in ("voter", "peer", "leader", "current", "offline", "seen (s ago)"):
            table.add_column(col)
        for p in group["peers"]:
            table.add_row(
                p["name"] + (" (this view)" if p["self"] else ""),
                p["peer"],
                "yes" if p["leader"] else "",
                "yes" if p["current"] else "no",
                "yes" if p["offline"] else "",
                f"{p['active']:.1f}" if not p["self"] else "",
            )
        out.print(table)
    else:
        out.print(f"metadata group not read: {view.get('group_error')}", markup=False)
    if view.get("presence_error"):
        out.print(f"presence not read, so no findings: {view['presence_error']}", markup=False)
    for f in view.get("findings", []):
        who = f["node"] or "(name unknown)"
        out.print(f"{f['kind']}: {who} ({f['peer']}): {f['detail']}", markup=False)
    if not view.get("findings") and not view.get("presence_error"):
        out.print("no findings")


@app.command("list")
def list_cmd(
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
    as_json: JsonFlag = False,
) -> None:
    """Print what each node advertises beside how the metadata group counts it (FL-147)."""
    show_view(
        url,
        token,
        "/fleet/broker",
        as_json=as_json,
        printer=_print_view,
        timeout=LIST_TIMEOUT,
        width=140,
        need={"node": str},
    )


@app.command("remove")
def remove_cmd(
    node: Annotated[str, typer.Argument(help="The dead member's node id")] = "",
    peer: Annotated[str, typer.Option("--peer", "-peer", help="Remove a voter by raft peer id instead")] = "",
    confirm: Annotated[
        str, typer.Option("--confirm", "-confirm", help="The node id (or peer id) again")
    ] = "",
    force: Annotated[
        bool, typer.Option("--force", "-force", help="Remove a member whose lease is live")
    ] = False,
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
) -> None:
    """Remove a member gone for good from the broker's metadata group (FL-149)."""
    out = Console(width=140, markup=False, highlight=False)
    if bool(node) == bool(peer):
        out.print("name exactly one voter: NODE, or --peer ID")
        raise typer.Exit(2)
    target = node or peer
    route = "/fleet/broker/remove/{target}" if node else "/fleet/broker/remove-peer/{target}"
    code, answer = call(
        "POST",
        url,
        token,
        route,
        parts={"target": target},
        query={"confirm": confirm, "force": "true" if force else None},
        names={"target": "NODE" if node else "--peer"},
        timeout=REMOVE_TIMEOUT,
        out=out,
        need={"peer": str, "by": str},
    )
    if code == 0:
        answer = clean_view(answer)
        voters = ", ".join(p["name"] for p in (answer.get("group") or {}).get("peers", []))
        out.print(
            f"removed {answer.get('node') or '(name unknown)'} ({answer['peer']}) by {answer['by']}; voters now: {voters}"
        )
    elif code == 1 and isinstance(answer, dict) and answer.get("error") == "outcome_unknown":
        out.print("read `crewlet fleet broker list` before asking again")
    raise typer.Exit(code)
