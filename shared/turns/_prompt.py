"""Prompt assembly (CO-17): the seat's system prompt from the pinned org, and the user message.

The system prompt holds the sections that depend only on the org snapshot and the tool
surface, in this order (keys orig): ``identity``, ``company_context``, ``background``,
``responsibilities``, ``behavioral_guidelines``, ``unit``, ``policies``, ``team``,
``your_turn``, ``available_tools``. So it is byte-stable for one seat within one epoch, and a
provider's prefix cache hits it on every turn (CO-17).

The user message holds what depends on the trigger: ``task`` (rendered per trigger type), the
turn's memory sections (AG-8: ``personal_memory``, ``similar_prior_work``, ``counterparties``) and
``relevant_knowledge`` (the prefetch). CO-17 lists ``relevant_knowledge`` among the system
sections but also asks for a byte-stable system prompt; the two cannot both hold, and we keep
the stable prefix (ours). An empty section is left out. Each section is ``## <title>\\n\\n
<body>\\n\\n``, and its recorded byte length is that chunk's UTF-8 length, so the lengths sum
to the prompt's.

Prefetch (CO-17, ours): the workspace search with the trigger text's first 512 characters, top
3 hits, 600 characters of each page.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from shared import logs
from shared.config import OrgModel, Seat
from shared.tools import Tool, Workspace

from ._result import Section
from ._trigger import Trigger

__all__ = [
    "PREFETCH_CHARS",
    "PREFETCH_HITS",
    "PREFETCH_QUERY_CHARS",
    "Prompt",
    "build_prompt",
    "prefetch_knowledge",
]

PREFETCH_QUERY_CHARS = 512
"""The prefetch query is the trigger text's first this many characters (CO-17)."""
PREFETCH_HITS = 3
"""Pages prefetched (CO-17)."""
PREFETCH_CHARS = 600
"""Characters of each prefetched page (CO-17)."""
_COMMENTS = 5

_log = logs.get("turns")


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt (CO-17).

    Attributes:
        system: The system prompt.
        system_sections: Its sections; bytes sum to ``len(system.encode())``.
        user: The first user message.
        user_sections: Its sections; bytes sum to ``len(user.encode())``.
    """

    system: str
    system_sections: tuple[Section, ...]
    user: str
    user_sections: tuple[Section, ...]


def _render(parts: Sequence[tuple[str, str, str]]) -> tuple[str, tuple[Section, ...]]:
    chunks: list[str] = []
    sections: list[Section] = []
    for key, title, body in parts:
        body = body.strip()
        if not body:
            continue
        chunk = f"## {title}\n\n{body}\n\n"
        chunks.append(chunk)
        sections.append(Section(key, title, len(chunk.encode("utf-8"))))
    return "".join(chunks), tuple(sections)


def _bullets(items: Sequence[str]) -> str:
    return "\n".join(f"- {i}" for i in items)


def _who(org: OrgModel, handle: str) -> str:
    seat = org.seat(handle)
    if seat is None:
        return handle
    return f"{handle} ({seat.name}{', human' if seat.kind == 'human' else ''})"


def _identity(org: OrgModel, seat: Seat) -> str:
    company = org.company
    lines = [f"You are {seat.name} (handle `{seat.handle}`) at {company.name}."]
    unit = org.unit(seat.unit_id) if seat.unit_id else None
    if unit is not None:
        lines.append(f"Unit: {unit.name} (`{unit.id}`).")
    managers = org.managers_of(seat.handle)
    if managers:
        lines.append("Managers: " + ", ".join(_who(org, m) for m in managers) + ".")
    reports = org.reports_of(seat.handle)
    if reports:
        lines.append("Direct reports: " + ", ".join(_who(org, r) for r in reports) + ".")
    if seat.role.goal:
        lines.append(f"Your goal: {seat.role.goal}")
    return "\n".join(lines)


def _unit(org: OrgModel, seat: Seat) -> str:
    unit = org.unit(seat.unit_id) if seat.unit_id else None
    if unit is None:
        return ""
    lines = [f"{unit.name} (`{unit.id}`, {unit.type})."]
    if unit.unit.purpose:
        lines.append(f"Purpose: {unit.unit.purpose}")
    if unit.unit.goals:
        lines.append("Goals:\n" + _bullets(unit.unit.goals))
    if unit.project:
        lines.append(f"Tracker project: {unit.project}")
    if unit.space:
        lines.append(f"Knowledge space: {unit.space}")
    return "\n".join(lines)


def _team(org: OrgModel, seat: Seat) -> str:
    lines = []
    for handle in org.reports_of(seat.handle):
        report = org.seat(handle)
        if report is None:
            continue
        line = f"- `{handle}` — {report.name}" + (" (human)" if report.kind == "human" else "")
        if report.role.goal:
            line += f". Goal: {report.role.goal}"
        if report.role.responsibilities:
            line += ". Responsibilities: " + "; ".join(report.role.responsibilities)
        lines.append(line)
    return "\n".join(lines)


_YOUR_TURN = (
    "Act through your tools: what you decide must land in the tracker, the knowledge base or "
    "the files, not only in your answer. Answer people where they asked (a decision goes in "
    "writing on the work item). Use `lookup_colleague` to find who does what. End the turn by "
    "calling `submit_work` with outcome `delivered`, `no_action` or `blocked` (with evidence)."
)


def _tools(tools: Sequence[Tool]) -> str:
    return "\n".join(f"- `{t.name}`: {' '.join(t.description.split())}" for t in tools)


def _mcp(servers: Sequence[str]) -> str:
    """The seat's MCP servers by name only (CO-34): their tools come on with ``activate_tool``."""
    if not servers:
        return ""
    names = "\n".join(f"- `{name}`" for name in servers)
    return (
        f"{names}\n\nCall `list_mcp_server_tools` with a server's name to see its tools, then "
        "`activate_tool` with a tool's name: it is yours to call from the next round on."
    )


def _system(
    org: OrgModel,
    seat: Seat,
    tools: Sequence[Tool],
    mcp_servers: Sequence[str] = (),
    *,
    your_turn: str = _YOUR_TURN,
) -> tuple[str, tuple[Section, ...]]:
    company = org.company
    context = "\n".join(
        x
        for x in (
            f"Company: {company.name}",
            f"Mission: {company.mission}" if company.mission else "",
            f"Vision: {company.vision}" if company.vision else "",
        )
        if x
    )
    return _render(
        [
            ("identity", "Identity", _identity(org, seat)),
            ("company_context", "Company", context),
            ("background", "Background", seat.role.backstory),
            ("responsibilities", "Responsibilities", _bullets(seat.role.responsibilities)),
            ("behavioral_guidelines", "Behavioral guidelines", _bullets(seat.role.behavioral_guidelines)),
            ("unit", "Your unit", _unit(org, seat)),
            ("policies", "Company policies", _bullets(company.policies)),
            ("team", "Your team", _team(org, seat)),
            ("your_turn", "Your turn", your_turn),
            ("available_tools", "Available tools", _tools(tools)),
            ("mcp_servers", "MCP tool servers", _mcp(mcp_servers)),
        ]
    )


def _task(trigger: Trigger, item: dict[str, Any] | None) -> str:
    if trigger.source == "work" and trigger.work_item_key:
        facts: dict[str, Any] = {**(item or {}), **dict(trigger.work_item or {})}
        lines = [f"Work item {trigger.work_item_key} was {trigger.reason or 'updated'} to you."]
        for name in ("title", "status", "assignee"):
            if facts.get(name):
                lines.append(f"{name.capitalize()}: {facts[name]}")
        if facts.get("body"):
            lines.append(f"\n{facts['body']}")
        comments = facts.get("comments") or []
        if isinstance(comments, list) and comments:
            lines.append("\nLatest comments:")
            for c in comments[-_COMMENTS:]:
                if isinstance(c, dict):
                    lines.append(f"- {c.get('author', '?')}: {c.get('body', '')}")
        if trigger.text:
            lines.append(f"\n{trigger.text}")
        return "\n".join(lines)
    if trigger.type == "task_assigned":
        head = "Task" + (f" from {trigger.sender}" if trigger.sender else "")
    elif trigger.type == "a2a_request":  # CO-36: a colleague's ask; the final answer goes back
        head = f"Ask from @{trigger.sender}" if trigger.sender else "Ask from a colleague"
    elif trigger.type == "a2a_message":
        head = f"Answer from @{trigger.sender}" if trigger.sender else "Answer from a colleague"
    elif trigger.source == "api":
        head = f"Message from {trigger.sender or 'an API client'}"
    else:
        head = f"Notification from {trigger.source or 'an integration'}"
        if trigger.sender:
            head += f" (sender: {trigger.sender})"
    lines = [f"{head}:", "", trigger.text]
    if trigger.work_item_key:
        lines.append(f"\nWork item: {trigger.work_item_key}")
    return "\n".join(lines)


def _knowledge(hits: Sequence[dict[str, Any]]) -> str:
    return "\n\n".join(
        f"### {h.get('space', '?')} / {h.get('title', '?')}\n{h.get('text', '')}" for h in hits
    )


def build_prompt(
    org: OrgModel,
    seat: Seat,
    trigger: Trigger,
    tools: Sequence[Tool],
    *,
    knowledge: Sequence[dict[str, Any]] = (),
    work_item: dict[str, Any] | None = None,
    mcp_servers: Sequence[str] = (),
    memory: Sequence[tuple[str, str, str]] = (),
) -> Prompt:
    """Render a seat's prompt for one trigger (CO-17, AG-8).

    Args:
        org: The pinned org snapshot.
        seat: The agent seat.
        trigger: What woke it.
        tools: The tool surface, in catalogue order.
        knowledge: Prefetched pages ``{"space", "title", "text"}`` (see
            :func:`prefetch_knowledge`).
        work_item: The trigger's item as the workspace returned it, or None.
        mcp_servers: The seat's started MCP servers, by name (CO-34); the section is left out
            when there are none.
        memory: The turn's recall sections ``(key, title, body)`` (AG-8), rendered after the task.

    Returns:
        The prompt and its sections.
    """
    system, system_sections = _system(org, seat, tools, mcp_servers)
    user, user_sections = _render(
        [
            ("task", "Task", _task(trigger, work_item)),
            *memory,
            ("relevant_knowledge", "Relevant knowledge", _knowledge(knowledge)),
        ]
    )
    return Prompt(system, system_sections, user, user_sections)


async def prefetch_knowledge(
    workspace: Workspace, trigger: Trigger, *, query: str = ""
) -> list[dict[str, Any]]:
    """Fetch the pages most relevant to a trigger (CO-17). Never raises.

    Args:
        workspace: The seat's workspace.
        trigger: What woke the seat.
        query: The search text; "" for the trigger text's first 512 characters.

    Returns:
        Up to 3 ``{"space", "title", "text"}`` with at most 600 characters of each page (the
        search snippet when the page cannot be read); [] when the search fails or finds nothing.
    """
    q = (query or trigger.text)[:PREFETCH_QUERY_CHARS].strip()
    if not q:
        return []
    try:
        found = await workspace.search_pages(q)
    except Exception as e:  # noqa: BLE001 - a failed prefetch leaves the section out
        _log.warning("knowledge_prefetch_failed", error=f"{type(e).__name__}: {e}")
        return []
    out = []
    for hit in (found.get("hits") or [])[:PREFETCH_HITS]:
        space, title = str(hit.get("space", "")), str(hit.get("title", ""))
        text = str(hit.get("snippet", ""))
        try:
            page = await workspace.read_page(space, title)
            text = str(page.get("body", text))
        except Exception:  # noqa: BLE001, S110 - the snippet stands in
            pass
        out.append({"space": space, "title": title, "text": text[:PREFETCH_CHARS]})
    return out
