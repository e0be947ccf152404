"""``crewlet retention evict|readmit`` (ES-51) and ``ack`` (ES-49): operator gestures, sent to one data node.

``crewlet retention evict <node> --confirm <node> [--force] [--op-id ID] [--url U]`` and
``crewlet retention readmit <node> --confirm <node> [--op-id ID] [--url U]`` post to
``/retention/evict`` / ``/retention/readmit`` on the node at ``--url`` (``CREWLET_URL``) with the
token from ``CREWLET_API_TOKEN``. The node judges the gesture once before writing anything, then
writes one gate record per counted log under a one-minute node-side budget that survives this
command going away.

Output: one line per log (``tracker: applied at 41``, ``pages: pending``...) and the gesture id.
A gesture killed mid-way is finished exactly once by running the same command again with
``--op-id <gesture id>`` (printed first, before the node is asked, so it survives a kill).

Exit codes: 0 every log ``applied``; 1 some log ``pending``/``unknown``/``not written`` (rerun
with ``--op-id``); 2 refused (live node, below a floor, bad id, no token, unreachable node).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, NoReturn

import httpx
import typer

from shared.estate import mint_op_id

__all__ = ["ack_cmd", "evict_cmd", "readmit_cmd"]

Url = Annotated[str, typer.Option("--url", envvar="CREWLET_URL", help="A data node's base URL")]
Token = Annotated[str, typer.Option("--token", envvar="CREWLET_API_TOKEN", help="API token")]
Confirm = Annotated[str, typer.Option("--confirm", "-confirm", help="The node id again, to confirm")]
OpId = Annotated[str, typer.Option("--op-id", "-op-id", help="Finish the gesture with this id")]


def _fail(line: str, code: int = 2) -> NoReturn:
    typer.echo(line, err=True)
    raise typer.Exit(code)


def _post(
    url: str, token: str, path: str, body: dict[str, Any], *, what: str, timeout: float, unreached: str = ""
) -> Any:
    """POST ``body`` to ``path`` on the node; return the 200 answer or exit 2 naming why not."""
    if not token:
        _fail("no API token: set CREWLET_API_TOKEN or pass --token")
    base = url.rstrip("/")
    try:
        with httpx.Client(timeout=timeout) as client:
            r = client.post(base + path, json=body, headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as e:
        _fail(f"cannot reach the node at {base}: {type(e).__name__}: {e}{unreached}")
    try:
        answer = r.json()
    except ValueError:
        _fail(f"{base} answered {r.status_code}: {r.text[:500]}")
    if r.status_code != 200:
        detail = answer.get("detail", "")
        _fail(
            f"{what} refused ({r.status_code} {answer.get('error', '')}): "
            f"{detail if isinstance(detail, str) else json.dumps(detail)}"
        )
    return answer


def _gesture(action: str, node: str, confirm: str, force: bool, op_id: str, url: str, token: str) -> None:
    if not token:
        _fail("no API token: set CREWLET_API_TOKEN or pass --token")
    gesture = op_id or mint_op_id(f"{action}-{node}")
    typer.echo(f"gesture {gesture} (rerun with --op-id {gesture} to finish it if this is cut short)")
    body: dict[str, Any] = {"node": node, "confirm": confirm, "op_id": gesture}
    if force:
        body["force"] = True
    answer = _post(
        url,
        token,
        f"/retention/{action}",
        body,
        what=f"{action} {node}",
        timeout=90.0,
        unreached=" (the gesture may have started: rerun)",
    )
    pending = False
    for part in answer.get("logs", []):
        where = f" at {part['position']}" if part.get("position") else ""
        extra = (
            f" ({part.get('reason') or part.get('detail')}; {part.get('action')})"
            if part.get("action")
            else ""
        )
        typer.echo(f"{part['log']}: {part['outcome']}{where}{extra}")
        pending = pending or part["outcome"] != "applied"
    if answer.get("forced_unjudged"):
        typer.echo("forced: the leases could not be read, so the gesture was not judged", err=True)
    if pending:
        _fail(f"not finished: rerun with --op-id {gesture}", 1)


def evict_cmd(
    node: Annotated[str, typer.Argument(help="The node to evict")],
    confirm: Confirm = "",
    force: Annotated[bool, typer.Option("--force", "-force", help="Evict a node that looks live")] = False,
    op_id: OpId = "",
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
) -> None:
    """Stop counting a node that is gone for good, so the trim can pass it (ES-51)."""
    _gesture("evict", node, confirm, force, op_id, url, token)


def readmit_cmd(
    node: Annotated[str, typer.Argument(help="The node to readmit")],
    confirm: Confirm = "",
    op_id: OpId = "",
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
) -> None:
    """Count an evicted node again; refused while it is below a trim floor (ES-51)."""
    _gesture("readmit", node, confirm, False, op_id, url, token)


def ack_cmd(
    stream: Annotated[
        str, typer.Option("--stream", "-stream", help="CREWLET_TRACKER_LOG or CREWLET_PAGES_LOG")
    ],
    position: Annotated[int, typer.Option("--position", "-position", help="Backed up through this sequence")],
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
) -> None:
    """Say the log is backed up through POSITION (``retention.backup_floor: operator``, ES-49)."""
    answer = _post(
        url, token, "/retention/ack", {"stream": stream, "position": position}, what="ack", timeout=30.0
    )
    typer.echo(f"{answer['stream']} acked as backed up through {answer['seq']}")
