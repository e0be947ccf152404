"""``crewlet fleet status`` / ``make fleet-status``: print a node's ``GET /fleet`` (FL-7, FL-117).

Each node's row carries its posture and its config epoch with the apply status (``3 ok``,
``2 error``); a node's apply error is printed in full below the table.

Exit 0 when the node answered; 1 when it could not be reached or answered 503 (lease store
unavailable); 2 when no token is set or the token is refused.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

__all__ = ["show"]


def _config_cell(node: dict[str, Any]) -> str:
    """``epoch N status`` from the node's ``crewlet_status`` row (FL-117); ``-`` when it aged out."""
    if node.get("config_epoch") is None:
        return f"{node.get('applied_epoch', '')} (no status)"
    return f"{node['config_epoch']} {node.get('config_status') or ''}".strip()


def show(url: str, token: str, *, as_json: bool = False, console: Console | None = None) -> int:
    """Fetch ``{url}/fleet`` and print it.

    Args:
        url: The node's base URL.
        token: A bearer token with ``state:read``.
        as_json: Print the raw JSON instead of tables.
        console: Where to print (stdout by default).

    Returns:
        The exit code.
    """
    out = console or Console(width=120)
    if not token:
        out.print("no API token: set CREWLET_API_TOKEN (or pass --token)")
        return 2
    try:
        with httpx.Client(timeout=10.0) as client:
            r = client.get(url.rstrip("/") + "/fleet", headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as e:
        out.print(f"cannot reach {url}: {e}")
        return 1
    if r.status_code in (401, 403):
        out.print(f"{url} refused the token ({r.status_code}); set CREWLET_API_TOKEN")
        return 2
    if r.status_code != 200:
        out.print(f"{url}/fleet answered {r.status_code}: {r.text}")
        return 1
    view: dict[str, Any] = r.json()
    if as_json:
        out.print_json(json.dumps(view))
        return 0
    nodes = Table(title=f"nodes (asked {view.get('asked', url)})")
    for col in ("node", "roles", "labels", "broker", "protocol", "posture", "config", "seats", "in flight"):
        nodes.add_column(col)
    errors: list[tuple[str, str]] = []
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
            str(n.get("seats_held", "")),
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
    return 0
