"""``lookup_colleague``, ``submit_work`` and the whole built-in surface (CO-16, CO-23).

``lookup_colleague`` (orig) resolves a handle, name, e-mail or external id (``contact`` and
``identities`` values) to a seat's profile; an exact match wins, otherwise a case-insensitive
substring search returns candidates. ``submit_work`` (orig) is always on the surface and ends
the phase when it succeeds.

``submit_work`` decodes the outcome against the turn's reply obligation (CO-31's first check,
:attr:`ToolContext.reply_mode`); a refusal is an error result the model reads (code in brackets):

- ``blocked`` needs ``evidence`` (``refused``);
- ``no_action`` on an owed turn (``tool`` or ``engine``) is refused (``reply_owed``): someone
  is waiting for an answer;
- ``delivered`` on a ``tool``-owed turn must rest on a successful delivering call that reached the
  asker's surface (:meth:`ToolContext.reaches_asker`), else it is refused (``not_delivered``).
  On an ``engine``-owed turn the engine hands the answer over itself, so ``delivered`` stands.
"""

from __future__ import annotations

from typing import Any

from ._asks import a2a_ask_tool
from ._errors import ToolFailed
from ._knowledge import file_tools, knowledge_tools
from ._memory import memory_tools
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
    fuzzy = exact or [h for h in handles if any(wanted in i.casefold() for i in _identifiers(ctx, h))]
    if len(exact) == 1 or len(fuzzy) == 1:
        handle = exact[0] if len(exact) == 1 else fuzzy[0]
        return {
            "match": _profile(ctx, handle),
            "candidates": [],
            "my_profile": await _own_profile(ctx, handle),
        }
    return {"match": None, "candidates": [_profile(ctx, h) for h in fuzzy[:_MAX_CANDIDATES]]}


_PROFILE_KEYS = (
    "subject_handle",
    "subject_external_id",
    "subject_platform",
    "subject_name",
    "traits",
    "interaction_count",
    "first_seen_at",
    "last_updated_at",
    "last_work_key",
)


async def _own_profile(ctx: ToolContext, handle: str) -> dict[str, Any] | None:
    """The caller's own counterparty profile of ``handle`` (AG-5), or None.

    Only the caller's rows are read (``counterparty_profiles`` of ``ctx.seat``), so another seat's
    view of the same colleague never shows. A node without memory, or an unreadable copy, answers
    None: the lookup itself still stands.
    """
    memory = ctx.memory
    if memory is None:
        return None
    ids = {i.casefold() for i in _identifiers(ctx, handle)}
    try:
        rows = await memory.rows(ctx.seat, ["counterparty_profiles"])
    except Exception:  # noqa: BLE001 - the colleague's org profile answers without it
        return None
    for row in rows:
        if row.get("observer_handle", ctx.seat) != ctx.seat:
            continue
        if row.get("subject_handle") == handle or str(row.get("subject_external_id") or "").casefold() in ids:
            return {k: row.get(k) for k in _PROFILE_KEYS}
    return None


class _ReplyOwed(ToolFailed):
    """``no_action`` on a turn that owes a reply (CO-31)."""

    code = "reply_owed"


class _NotDelivered(ToolFailed):
    """``delivered`` on a ``tool``-owed turn with nothing on the asker's surface (CO-31)."""

    code = "not_delivered"


def _asker(ctx: ToolContext) -> str:
    where = " or ".join(f"`{s}`" for s in ctx.reply_surfaces) or "any surface"
    return where + (f" (work item {ctx.reply_item})" if ctx.reply_item else "")


async def _submit(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    outcome = args["outcome"]
    evidence = args.get("evidence", "")
    if outcome == "blocked" and not evidence.strip():
        raise ToolFailed("outcome 'blocked' needs evidence: say what blocks the work", "evidence")
    if outcome == "no_action" and ctx.reply_mode != "none":
        raise _ReplyOwed(
            f"outcome 'no_action' is refused: this turn owes the asker a reply ({ctx.reply_mode}); "
            "answer them and submit 'delivered', or submit 'blocked' with evidence",
            "outcome",
        )
    if outcome == "delivered" and ctx.reply_mode == "tool" and not ctx.reached_asker:
        done = ", ".join(f"{d.tool} on {d.surface}" for d in ctx.deliveries) or "none"
        raise _NotDelivered(
            "outcome 'delivered' is refused: no successful delivering call reached the asker on "
            f"{_asker(ctx)} (this turn's deliveries: {done}); answer there first, or submit "
            "'blocked' with evidence",
            "outcome",
        )
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
            "Returns their handle, kind, unit, managers, reports and goal, and your own notes on "
            "them (my_profile); an ambiguous query returns candidates.",
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
    """Return a fresh registry holding every built-in (CO-23), in catalogue order: tracker,
    knowledge, files, colleagues, memory (AG-3, AG-4), ``a2a_ask``, then ``submit_work``."""
    return ToolRegistry(
        [
            *tracker_tools(),
            *knowledge_tools(),
            *file_tools(),
            *colleague_tools(),
            *memory_tools(),
            a2a_ask_tool(),
            submit_work_tool(),
        ]
    )


BUILTIN_TOOL_NAMES: tuple[str, ...] = tuple(builtin_tools().names())
"""The built-in names in catalogue order (pinned by a schema snapshot test)."""
