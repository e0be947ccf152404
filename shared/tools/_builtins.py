"""``lookup_colleague``, ``submit_work`` and the whole built-in surface (CO-16, CO-23).

``lookup_colleague`` (orig) resolves a handle, name, e-mail or external id (``contact`` and
``identities`` values) to a seat's profile; an exact match wins, otherwise a case-insensitive
substring search returns candidates. ``submit_work`` (orig) is always on the surface and ends
the phase when it succeeds; ``blocked`` needs ``evidence``.
"""

from __future__ import annotations

from typing import Any

from ._errors import ToolFailed
from ._knowledge import file_tools, knowledge_tools
from ._registry import Submission, Tool, ToolAnnotations, ToolContext, ToolRegistry
from ._tracker import tracker_tools

__all__ = ["BUILTIN_TOOL_NAMES", "builtin_tools", "colleague_tools", "submit_work_tool"]

_MAX_CANDIDATES = 10


def _profile(ctx: ToolContext, handle: str) -> dict[str, Any]:
    org = ctx.org
    assert org is not None
    seat = org.seat(handle)
    assert seat is not None
    return {
        "handle": seat.handle,
        "name": seat.name,
        "kind": seat.kind,
        "unit": seat.unit_id,
        "managers": list(org.managers_of(handle)),
        "reports": list(org.reports_of(handle)),
        "goal": seat.role.goal,
        "email": seat.role.email,
    }


def _identifiers(ctx: ToolContext, handle: str) -> list[str]:
    assert ctx.org is not None
    seat = ctx.org.seat(handle)
    assert seat is not None
    role = seat.role
    ids = [seat.handle, seat.name, role.email or ""]
    for extra in (role.contact, role.identities):
        if extra is not None:
            ids.extend(v for v in extra.model_dump().values() if isinstance(v, str))
    return [i for i in ids if i]


async def _lookup(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    if ctx.org is None:
        raise ToolFailed("no org model is loaded on this node", "query")
    query = args["query"].strip().lstrip("@")
    wanted = query.casefold()
    handles = [s.handle for s in (*ctx.org.seats, *ctx.org.humans)]
    exact = [h for h in handles if any(i.casefold() == wanted for i in _identifiers(ctx, h))]
    if len(exact) == 1:
        return {"match": _profile(ctx, exact[0]), "candidates": []}
    fuzzy = exact or [h for h in handles if any(wanted in i.casefold() for i in _identifiers(ctx, h))]
    if len(fuzzy) == 1:
        return {"match": _profile(ctx, fuzzy[0]), "candidates": []}
    return {"match": None, "candidates": [_profile(ctx, h) for h in fuzzy[:_MAX_CANDIDATES]]}


async def _submit(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    outcome = args["outcome"]
    evidence = args.get("evidence", "")
    if outcome == "blocked" and not evidence.strip():
        raise ToolFailed("outcome 'blocked' needs evidence: say what blocks the work", "evidence")
    ctx.submission = Submission(
        outcome=outcome,
        summary=args["summary"],
        deliveries=list(args.get("deliveries", [])),
        evidence=evidence,
        open_questions=list(args.get("open_questions", [])),
    )
    return {"accepted": True, "outcome": outcome}


def colleague_tools() -> list[Tool]:
    """Return ``lookup_colleague`` (CO-23)."""
    return [
        Tool(
            "lookup_colleague",
            "Find a colleague by handle, name, e-mail or external id (e.g. a GitHub login). "
            "Returns their handle, kind, unit, managers, reports and goal; an ambiguous query "
            "returns candidates.",
            {
                "type": "object",
                "properties": {"query": {"type": "string", "minLength": 1}},
                "required": ["query"],
                "additionalProperties": False,
            },
            _lookup,
            annotations=ToolAnnotations(read_only="yes", destructive="no", idempotent="yes", open_world="no"),
        )
    ]


def submit_work_tool() -> Tool:
    """Return ``submit_work`` (CO-16): always on the surface; a success ends the phase."""
    return Tool(
        "submit_work",
        "Finish your turn: say what you delivered (outcome delivered), that nothing was needed "
        "(no_action) or what blocks you (blocked, with evidence). Call it once, last.",
        {
            "type": "object",
            "properties": {
                "outcome": {"type": "string", "enum": ["delivered", "no_action", "blocked"]},
                "summary": {"type": "string", "minLength": 1},
                "deliveries": {"type": "array", "items": {"type": "string"}},
                "evidence": {"type": "string"},
                "open_questions": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["outcome", "summary"],
            "additionalProperties": False,
        },
        _submit,
        ends_turn=True,
        annotations=ToolAnnotations(read_only="yes", destructive="no", idempotent="yes", open_world="no"),
    )


def builtin_tools() -> ToolRegistry:
    """Return a fresh registry holding every P0 built-in (CO-23), in catalogue order:
    tracker, knowledge, files, colleagues, then ``submit_work``."""
    return ToolRegistry(
        [*tracker_tools(), *knowledge_tools(), *file_tools(), *colleague_tools(), submit_work_tool()]
    )


BUILTIN_TOOL_NAMES: tuple[str, ...] = tuple(builtin_tools().names())
"""The built-in names in catalogue order (pinned by a schema snapshot test)."""
