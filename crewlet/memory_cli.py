"""``crewlet memory show HANDLE``: one seat's memory through a running node (AG-9).

Prints ``GET /agents/{handle}/memory``: the diary (long entries, then short ones with their expiry),
the newest episodes, the counterparty profiles and the synthesized skills, and any section that
could not be read. Grant ``audit:read``. The URL and token default to ``CREWLET_URL`` and
``CREWLET_API_TOKEN``; every text from the node is printed with its control characters escaped
(the seat wrote it, a model may have chosen it).

Exit codes: 0 shown; 1 the node could not be reached or no data node answered; 2 refused (an
unknown or human handle, a token without the grant), no token, or a usage error.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.console import Console

from ._node_api import JsonFlag, Token, Url, show_view

__all__ = ["app"]

app = typer.Typer(no_args_is_help=True, help="A seat's memory: its diary, episodes and profiles (AG-9).")

TIMEOUT = 30.0
"""Seconds the command waits for the node (four reads through the estate router)."""


def _when(row: dict[str, Any]) -> str:
    import datetime as dt

    value = row.get("created_at") or row.get("ended_at")
    if not isinstance(value, (int, float)):
        value = (row.get("written_at_us") or 0) / 1_000_000
    return dt.datetime.fromtimestamp(float(value), dt.UTC).strftime("%Y-%m-%d %H:%M")


def _print(view: dict[str, Any], out: Console) -> None:
    out.print(f"memory of {view['handle']} (agent {view['agent_id']}), as of {view.get('as_of_position')}")
    diary = view["personal_memories"]
    out.print(f"\ndiary: {len(diary['long'])} long, {len(diary['short'])} short")
    for row in diary["long"]:
        out.print(f"  [{_when(row)}] (retrieved {row.get('retrieval_count', 0)}x) {row.get('content', '')}")
    for row in diary["short"]:
        state = "expired" if row.get("expired") else "live"
        out.print(f"  [{_when(row)}] short, {state}: {row.get('content', '')}")
    out.print(f"\nepisodes: {len(view['episodes'])} (newest first)")
    for e in view["episodes"]:
        out.print(
            f"  [{_when(e)}] {e.get('work_key')}: {e.get('task_summary', '')} -> {e.get('review_outcome')}"
        )
    out.print(f"\ncounterparty profiles: {len(view['counterparty_profiles'])}")
    for p in view["counterparty_profiles"]:
        out.print(
            f"  {p.get('subject_name') or p.get('subject_handle')}: {p.get('interaction_count', 0)} interactions"
        )
    out.print(f"\nsynthesized skills: {len(view['synthesized_skills'])}")
    for s in view["synthesized_skills"]:
        out.print(f"  {s.get('name')}: {s.get('description', '')}")
    for err in view.get("errors") or []:
        out.print(f"\nunreadable section {err.get('section')}: {err.get('error')}")


@app.command("show")
def show_cmd(
    handle: Annotated[str, typer.Argument(help="The seat's handle")],
    url: Url = "http://127.0.0.1:8080",
    token: Token = "",
    as_json: JsonFlag = False,
) -> None:
    """Print a seat's diary, episodes, counterparty profiles and skills (AG-9)."""
    show_view(
        url,
        token,
        "/agents/{handle}/memory",
        parts={"handle": handle},
        as_json=as_json,
        printer=_print,
        timeout=TIMEOUT,
        need={"handle": str, "personal_memories": dict, "episodes": list},
        refusals_to_stderr=True,
    )
