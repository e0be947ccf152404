"""What a turn sees of a seat's MCP servers: names, then tools on request (CO-34, CO-23).

The executor's prompt lists the built-ins and the MCP *server names* only
(:meth:`McpSurface.servers`). Two built-in tools let the model go further:

- ``list_mcp_server_tools{server}`` lists one server's tools (name, description, hints);
- ``activate_tool{name}`` adds one of them to the turn's registry, so it is on the tool surface
  from the next round (the turn loop re-reads :meth:`~shared.tools.ToolRegistry.specs` every
  round).

An activated tool has origin ``mcp:<server>``, the name ``tool_prefix + tool name`` (characters a
model API refuses are replaced by ``_``), the server's annotation hints overridden per hint by
``tool_annotations`` (by bare or prefixed name, snake_case or camelCase hint names; an absent
hint stays ``unknown``, never ``no``), and a time limit one second above the server's
``request_timeout_seconds`` so the server's own readable timeout error wins the race.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from mcp import types as mcp_types

from shared.tools import Hint, Tool, ToolAnnotations, ToolContext, ToolFailed, ToolRegistry

from ._errors import McpServerUnavailable
from ._session import McpServerSession

__all__ = ["ACTIVATE_TOOL", "LIST_TOOLS_TOOL", "McpSurface", "hint_overrides"]

LIST_TOOLS_TOOL = "list_mcp_server_tools"
"""The built-in that lists one MCP server's tools (CO-34, orig name)."""
ACTIVATE_TOOL = "activate_tool"
"""The built-in that brings one MCP tool onto the surface for the next round (CO-34, orig name)."""

_NAME_BAD = re.compile(r"[^A-Za-z0-9_-]")
_NAME_MAX = 64
_DESCRIPTION_MAX = 500
_HINT_FIELDS = {
    "readonly": "read_only",
    "destructive": "destructive",
    "idempotent": "idempotent",
    "openworld": "open_world",
}


def _hint_key(raw: str) -> str | None:
    key = raw.replace("_", "").lower()
    key = key.removesuffix("hint")
    return _HINT_FIELDS.get(key)


def _hint(value: bool | None) -> Hint:
    if value is None:
        return "unknown"
    return "yes" if value else "no"


def hint_overrides(overrides: dict[str, bool]) -> dict[str, Hint]:
    """Normalise one ``tool_annotations`` entry to :class:`~shared.tools.ToolAnnotations` fields.

    ``readOnlyHint``, ``read_only_hint``, ``readOnly`` and ``read_only`` all name ``read_only``
    (likewise ``destructive``, ``idempotent``, ``open_world``); unknown names are ignored.

    Returns:
        Field name -> ``yes`` | ``no``.
    """
    out: dict[str, Hint] = {}
    for raw, value in overrides.items():
        key = _hint_key(raw)
        if key is not None:
            out[key] = _hint(bool(value))
    return out


def _clean_schema(schema: Any) -> dict[str, Any]:
    """A JSON-Schema object the tools seam can check: sub-schemas that are not objects (``true``)
    become ``{}`` (anything goes), and the top level is an object schema."""
    if not isinstance(schema, dict):
        return {}
    out = dict(schema)
    props = out.get("properties")
    if isinstance(props, dict):
        out["properties"] = {k: _clean_schema(v) for k, v in props.items()}
    elif "properties" in out:
        out["properties"] = {}
    if "items" in out:
        out["items"] = _clean_schema(out["items"])
    return out


def _surface_name(prefix: str | None, name: str) -> str:
    return _NAME_BAD.sub("_", f"{prefix or ''}{name}")[:_NAME_MAX]


def _render(result: mcp_types.CallToolResult) -> dict[str, Any]:
    out: dict[str, Any] = {}
    texts = [b.text for b in result.content if isinstance(b, mcp_types.TextContent)]
    others = [
        b.model_dump(mode="json", by_alias=True, exclude_none=True)
        for b in result.content
        if not isinstance(b, mcp_types.TextContent)
    ]
    if texts:
        out["text"] = "\n".join(texts)
    if result.structured_content is not None:
        out["structured"] = result.structured_content
    if others:
        out["content"] = others
    return out


@dataclass(frozen=True)
class _Entry:
    session: McpServerSession
    tool: mcp_types.Tool
    name: str

    @property
    def server(self) -> str:
        return self.session.name

    def annotations(self) -> ToolAnnotations:
        given = self.tool.annotations
        hints: dict[str, Hint] = {
            "read_only": _hint(given.read_only_hint if given else None),
            "destructive": _hint(given.destructive_hint if given else None),
            "idempotent": _hint(given.idempotent_hint if given else None),
            "open_world": _hint(given.open_world_hint if given else None),
        }
        overrides = self.session.server.tool_annotations
        for key in (self.tool.name, self.name):  # bare first; the prefixed name wins
            hints.update(hint_overrides(overrides.get(key, {})))
        return ToolAnnotations(**hints)

    def description(self) -> str:
        text = self.tool.description or self.tool.title or self.tool.name
        return text if len(text) <= _DESCRIPTION_MAX else text[: _DESCRIPTION_MAX - 1] + "…"

    def make_tool(self) -> Tool:
        session, bare = self.session, self.tool.name

        async def handler(arguments: dict[str, Any], ctx: ToolContext) -> Any:
            return _render(await session.call(bare, arguments))

        return Tool(
            self.name,
            f"[MCP server {self.server}] {self.description()}",
            _clean_schema(self.tool.input_schema) | {"type": "object"},
            handler,
            origin=f"mcp:{self.server}",
            annotations=self.annotations(),
            timeout_seconds=session.server.request_timeout_seconds + 1.0,
        )


def _active(registry: ToolRegistry, entry: _Entry) -> bool:
    present = registry.get(entry.name)
    return present is not None and present.origin == f"mcp:{entry.server}"


class McpSurface:
    """A seat's MCP servers as one turn sees them (CO-34).

    Args:
        sessions: The seat's own sessions and the node's shared ones, in prompt order.
    """

    def __init__(self, sessions: Sequence[McpServerSession]) -> None:
        self._sessions = list(sessions)

    def servers(self) -> list[str]:
        """The names of the servers that are running, for the executor's prompt."""
        return [s.name for s in self._sessions if s.running]

    def failures(self) -> dict[str, str]:
        """Server name -> why it is not running, for servers that failed to start or exited."""
        return {s.name: s.error or s.state for s in self._sessions if s.state == "failed"}

    def _session(self, server: str) -> McpServerSession:
        for s in self._sessions:
            if s.name == server:
                if not s.running:
                    raise McpServerUnavailable(
                        f"MCP server {server!r} is not running: {s.error or s.state}", server=server
                    )
                return s
        known = ", ".join(self.servers()) or "none"
        raise ToolFailed(f"no MCP server named {server!r}; the running servers are: {known}", "server")

    def _entries(self, session: McpServerSession) -> list[_Entry]:
        return [_Entry(session, t, _surface_name(session.server.tool_prefix, t.name)) for t in session.tools]

    def turn_registry(self, base: ToolRegistry) -> ToolRegistry:
        """Return a per-turn copy of ``base`` with ``list_mcp_server_tools`` and ``activate_tool``.

        With no MCP server configured for the seat the copy is returned as is. Activation adds the
        MCP tool to *this* copy only, so it lasts for the turn.

        Args:
            base: The seat's built-in surface (not modified).

        Returns:
            The turn's registry.

        Raises:
            ToolRegistryError: ``base`` already holds a tool named like one of the two built-ins.
        """
        registry = ToolRegistry(list(base))
        if not self._sessions:
            return registry
        registry.add(self._list_tool(registry))
        registry.add(self._activate_tool(registry))
        return registry

    def _list_tool(self, registry: ToolRegistry) -> Tool:
        async def handler(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
            session = self._session(arguments["server"])
            return {
                "server": session.name,
                "tools": [
                    {
                        "name": e.name,
                        "description": e.description(),
                        "annotations": vars(e.annotations()),
                        "active": _active(registry, e),
                    }
                    for e in self._entries(session)
                ],
                "next": f"call {ACTIVATE_TOOL} with a tool name to use it from the next round",
            }

        return Tool(
            LIST_TOOLS_TOOL,
            "List the tools of one MCP server (its name is in your instructions). A listed tool "
            f"is not callable until you call {ACTIVATE_TOOL} with its name.",
            {
                "type": "object",
                "properties": {"server": {"type": "string", "minLength": 1}},
                "required": ["server"],
                "additionalProperties": False,
            },
            handler,
            annotations=ToolAnnotations(read_only="yes", destructive="no", idempotent="yes", open_world="no"),
        )

    def _activate_tool(self, registry: ToolRegistry) -> Tool:
        async def handler(arguments: dict[str, Any], ctx: ToolContext) -> dict[str, Any]:
            name: str = arguments["name"]
            server: str | None = arguments.get("server")
            sessions = [self._session(server)] if server else [s for s in self._sessions if s.running]
            matches = [e for s in sessions for e in self._entries(s) if name in (e.name, e.tool.name)]
            exact = [e for e in matches if e.name == name]
            matches = exact or matches
            if not matches:
                raise ToolFailed(
                    f"no MCP tool named {name!r}; call {LIST_TOOLS_TOOL} to see a server's tools", "name"
                )
            if len({e.server for e in matches}) > 1:
                servers = ", ".join(sorted({e.server for e in matches}))
                raise ToolFailed(f"{name!r} is a tool of several servers ({servers}); pass server", "server")
            entry = matches[0]
            present = registry.get(entry.name)
            if present is not None:
                if present.origin == f"mcp:{entry.server}":
                    return {"activated": entry.name, "server": entry.server, "already_active": True}
                raise ToolFailed(
                    f"a tool named {entry.name!r} is already on the surface ({present.origin}); "
                    f"the MCP server {entry.server!r} needs a tool_prefix",
                    "name",
                )
            tool = entry.make_tool()
            registry.add(tool)
            return {
                "activated": tool.name,
                "server": entry.server,
                "available": "from the next round",
                "parameters": tool.parameters,
            }

        return Tool(
            ACTIVATE_TOOL,
            f"Bring one MCP tool (a name from {LIST_TOOLS_TOOL}) onto your tool surface; you can "
            "call it from the next round on.",
            {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 1},
                    "server": {"type": "string", "minLength": 1},
                },
                "required": ["name"],
                "additionalProperties": False,
            },
            handler,
            annotations=ToolAnnotations(read_only="yes", destructive="no", idempotent="yes", open_world="no"),
        )
