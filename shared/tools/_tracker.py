"""Built-in tracker tools (CO-23, CO-24): list, get, create, update and comment on work items.

Names are the orig ones. Arguments follow the :class:`~shared.tools.Workspace` contract;
``assignee: "me"`` means the calling seat. Successful writes are recorded on the context
(:meth:`ToolContext.touch`) for CO-19's ``sole_write`` charging.

``create_work_item`` takes ``labels`` and ``external`` (the basis of the outside object the item
mirrors, e.g. ``github:186853002#1``: one item per basis, CO-35) and ``update_work_item`` takes
``labels``; they reach the workspace as keyword arguments, and only when the model gave them, so a
workspace that does not take them still serves every other call and refuses these by name.

.. versionchanged:: 0.1 ``labels``, ``external`` and status ``reopened`` (issue 10).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from shared.config import KEY_PATTERN

from ._errors import WorkspaceRefused
from ._registry import Tool, ToolAnnotations, ToolContext
from ._schema import arguments

__all__ = ["STATUSES", "tracker_tools"]

STATUSES = ("todo", "reopened", "in_progress", "in_review", "done", "cancelled", "closed")
"""Work item statuses (CO-24; ``reopened`` is in group ``not_started``)."""

_ITEM_KEY = r"^[A-Z][A-Z0-9]{1,9}-[1-9][0-9]*$"
_KEY = {"type": "string", "pattern": _ITEM_KEY, "description": "The work item key, e.g. SUP-1."}
_HANDLE = {"type": "string", "minLength": 1, "description": "A seat handle, or 'me' for yourself."}
_READ = ToolAnnotations(read_only="yes", destructive="no", idempotent="yes", open_world="no")
_WRITE = ToolAnnotations(read_only="no", destructive="no", idempotent="no", open_world="no")


_LABELS = {
    "type": "array",
    "items": {"type": "string", "minLength": 1, "maxLength": 100},
    "maxItems": 50,
    "description": 'Labels, e.g. ["bug", "ui"].',
}


_CREATE_ARGS = arguments(
    {
        "project": {"type": "string", "pattern": KEY_PATTERN, "description": "Project key."},
        "title": {"type": "string", "minLength": 1, "maxLength": 500},
        "type": {"type": "string", "minLength": 1, "description": "task (default), bug, ..."},
        "body": {
            "type": "string",
            "description": "Markdown: the report and acceptance criteria.",
        },
        "assignee": _HANDLE,
        "labels": _LABELS,
        "external": {
            "type": "string",
            "minLength": 1,
            "maxLength": 200,
            "pattern": r"^\S+$",
            "description": "The outside object this item tracks, e.g. github:186853002#1. "
            "If an item already tracks it, that item is returned instead of a new one.",
        },
    },
    "project",
    "title",
)

_UPDATE_ARGS = arguments(
    {
        "key": _KEY,
        "status": {"type": "string", "enum": list(STATUSES)},
        "assignee": _HANDLE,
        "title": {"type": "string", "minLength": 1, "maxLength": 500},
        "body": {"type": "string"},
        "if_match": {"type": "integer", "minimum": 1},
        "labels": {**_LABELS, "description": "The new labels; replaces the whole list."},
    },
    "key",
)


def _me(value: Any, ctx: ToolContext) -> Any:
    return ctx.seat if value == "me" else value


def _extra(args: dict[str, Any], fn: Callable[..., Any], names: tuple[str, ...]) -> dict[str, Any]:
    """The optional arguments the model gave, checked against what the workspace method takes."""
    given = {n: args[n] for n in names if args.get(n) is not None}
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # not introspectable: let the call itself decide
        return given
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for name in given:
        if name not in params and not takes_any:
            raise WorkspaceRefused(f"{name} cannot be set on work items from this node yet", name)
    return given


async def _list(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    items = await ctx.workspace.list_work_items(
        project=args.get("project"), assignee=_me(args.get("assignee"), ctx), status=args.get("status")
    )
    limit = int(args.get("limit", 20))
    return {"items": items[:limit], "count": len(items), "truncated": len(items) > limit}


async def _get(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    return await ctx.workspace.get_work_item(args["key"])


async def _create(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    extra = _extra(args, ctx.workspace.create_work_item, ("labels", "external"))
    item = await ctx.workspace.create_work_item(
        args["project"],
        args.get("type", "task"),
        args["title"],
        args.get("body", ""),
        _me(args.get("assignee"), ctx),
        **extra,
    )
    ctx.touch(str(item.get("key", "")), item)
    return item


async def _update(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    extra = _extra(args, ctx.workspace.update_work_item, ("labels",))
    item = await ctx.workspace.update_work_item(
        args["key"],
        status=args.get("status"),
        assignee=_me(args.get("assignee"), ctx),
        title=args.get("title"),
        body=args.get("body"),
        if_match=args.get("if_match"),
        **extra,
    )
    ctx.touch(args["key"], item)
    return item


async def _comment(args: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
    comment = await ctx.workspace.comment_on_work_item(args["key"], args["body"])
    ctx.touch(args["key"])
    return comment


def tracker_tools() -> list[Tool]:
    """Return the tracker built-ins (CO-24), in catalogue order."""
    return [
        Tool(
            "list_work_items",
            "List work items, newest first. Filter by project key, assignee (a handle or 'me') "
            "and status; at most `limit` items (default 20).",
            arguments(
                {
                    "project": {"type": "string", "pattern": KEY_PATTERN},
                    "assignee": _HANDLE,
                    "status": {"type": "string", "enum": list(STATUSES)},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                }
            ),
            _list,
            annotations=_READ,
        ),
        Tool(
            "get_work_item",
            "Read one work item: its fields, version and latest comments.",
            arguments({"key": _KEY}, "key"),
            _get,
            annotations=_READ,
        ),
        Tool(
            "create_work_item",
            "Create a work item in a project (its key is returned, e.g. SUP-1). Assigning it to "
            "a colleague wakes them.",
            _CREATE_ARGS,
            _create,
            writes=True,
            delivers_to="work",
            annotations=_WRITE,
        ),
        Tool(
            "update_work_item",
            "Change a work item's status, assignee, title or body. A body change needs "
            "`if_match`, the version you read; a stale version is refused with the current one.",
            _UPDATE_ARGS,
            _update,
            writes=True,
            delivers_to="work",
            annotations=_WRITE,
        ),
        Tool(
            "comment_on_work_item",
            "Add a comment to a work item (decisions go in writing on the item).",
            arguments({"key": _KEY, "body": {"type": "string", "minLength": 1}}, "key", "body"),
            _comment,
            writes=True,
            delivers_to="work",
            annotations=_WRITE,
        ),
    ]
