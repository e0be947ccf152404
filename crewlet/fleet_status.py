"""``crewlet fleet status`` / ``make fleet-status``: print a node's ``GET /fleet`` (FL-7, FL-117).

Each node's row carries its posture and its config epoch with the apply status (``3 ok``,
``2 error``); a node's apply error is printed in full below the table.

Exit 0 when the node answered; 1 when it could not be reached, answered 503 (lease store
unavailable) or answered what is not a crewlet node's view; 2 when no token is set, the token or the
URL is not usable, or the node refused.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

from ._node_api import call, print_view

__all__ = ["show"]


def _config_cell(node: dict[str, Any]) -> str:
    """``epoch N status`` from the node's ``crewlet_status`` row (FL-117); ``-`` when it aged out."""
    if node.get("config_epoch") is None:
        return f"{node.get('applied_epoch', '')} (no status)"
    return f"{node['config_epoch']} {node.get('config_status') or ''}".strip()


def show(url: str, token: str, *, as_json: bool = False, console: Console | None = None) -> int:
    """Fetch ``{url}/fleet`` and print it (through :func:`crewlet._node_api.call`: a bad token or URL
    is refused before anything is sent, an answer that is not a crewlet node's is one line).

    Args:
        url: The node's base URL.
        token: A bearer token with ``state:read``.
        as_json: Print the raw JSON instead of tables.
        console: Where to print (stdout by default).

    Returns:
        The exit code.
    """
    out = console or Console(width=120, markup=False, highlight=False)
    code, view = call("GET", url, token, "/fleet", timeout=10.0, out=out, need={"nodes": list, "seats": list})
    if code != 0:
        return code
    if as_json:
        out.print_json(json.dumps(view))
        return 0
    return print_view(_print, view, out, out, url.rstrip("/") + "/fleet")


def _print(view: dict[str, Any], out: Console) -> None:
    """Print a cleaned ``GET /fleet`` answer: nodes, seats, duties, unmanned roles."""
    nodes = Table(title=f"nodes (asked {view.get('asked', '?')})")
    for col in ("node", "roles", "labels", "broker", "protocol", "posture", "config", "seats", "in flight"):
        nodes.add_column(col)
    errors: list[tuple[str, str]] = []
    # a node's seat count from the lease table printed below, not its presence row (renewed each
    # heartbeat, so right after boot it said 0 beside a table listing its four seats; issue 38)
    held: dict[str, int] = {}
    for s in view.get("seats") or []:
        held[str(s.get("node"))] = held.get(str(s.get("node")), 0) + 1
    for n in view.get("nodes", []):
        labels = ",".join(f"{k}={v}" for k, v in sorted((n.get("labels") or {}).items()))
        nodes.add_row(
            str(n["id"]),
            ",".join(n.get("roles", [])),
            labels,
            str(n.get("broker")),
            str(n.get("protocol")),
            str(n.get("posture")),
            _config_cell(n),
            str(held.get(str(n["id"]), 0) if view.get("seats") is not None else n.get("seats_held", "")),
            str(n.get("in_flight", "")),
        )
        if n.get("config_error"):
            errors.append((str(n["id"]), str(n["config_error"])))
    out.print(nodes)
    fleet_epoch = view.get("config_epoch")
    if fleet_epoch is not None:
        out.print(f"fleet config epoch: {fleet_epoch}")
    for node, error in errors:  # FL-117: the reason a node cannot apply, in full (≤ 2 000 bytes)
        out.print(f"config error on {node}: {error}", markup=False, highlight=False)
    seats = Table(title="seats")
    for col in ("seat", "node", "epoch", "renewed at"):
        seats.add_column(col)
    for s in view.get("seats", []):
        seats.add_row(s["seat"], s["node"], str(s["epoch"]), s.get("renewed_at", ""))
    for h in view.get("unowned_seats", []):
        seats.add_row(h, "(unowned)", "", "")
    out.print(seats)
    if view.get("duties"):
        duties = Table(title="duties")
        for col in ("duty", "node", "epoch"):
            duties.add_column(col)
        for d in view["duties"]:
            duties.add_row(d["duty"], d["node"], str(d["epoch"]))
        out.print(duties)
    out.print("unmanned roles: " + (", ".join(view.get("unmanned_roles", [])) or "none"))
    if view.get("unplaceable_seats"):
        out.print(
            "unplaceable seats: "
            + ", ".join(f"{u['seat']} ({u['selector']})" for u in view["unplaceable_seats"])
        )
