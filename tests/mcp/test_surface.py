"""What a turn sees (CO-34, CO-23): server names, list_mcp_server_tools, activate_tool, MCP calls
through the registry as error results rather than crashes."""

from __future__ import annotations

import json
import os
import signal
from typing import Any

from shared import mcp, tools

from .conftest import Started
from .helpers import call, server, time_server, tiny


async def seat_with(started: Started, *servers: mcp.ResolvedServer) -> mcp.SeatTools:
    seat = started.seat("ada")
    await seat.start(list(servers))
    return seat


async def test_list_activate_and_call_get_current_time(started: Started) -> None:
    seat = await seat_with(started, time_server())
    surface = seat.surface()
    assert surface.servers() == ["time"]
    base = tools.builtin_tools()
    registry = surface.turn_registry(base)
    assert registry.names()[: len(base)] == base.names()
    assert registry.names()[len(base) :] == [mcp.LIST_TOOLS_TOOL, mcp.ACTIVATE_TOOL]
    assert "get_current_time" not in registry

    listed = await call(registry, mcp.LIST_TOOLS_TOOL, {"server": "time"})
    assert not listed.is_error, listed.content
    entries = {t["name"]: t for t in listed.result["tools"]}
    assert entries["get_current_time"]["active"] is False
    assert entries["get_current_time"]["annotations"]["read_only"] == "yes"

    activated = await call(registry, mcp.ACTIVATE_TOOL, {"name": "get_current_time"})
    assert not activated.is_error, activated.content
    assert activated.result["activated"] == "get_current_time"
    tool = registry.get("get_current_time")
    assert tool is not None
    assert tool.origin == "mcp:time"
    assert tool.annotations == tools.ToolAnnotations("yes", "no", "yes", "no")
    assert not tool.delivers and not tool.fenced
    assert tool.timeout_seconds > time_server().request_timeout_seconds
    assert "get_current_time" in [s.name for s in registry.specs()]  # on the surface next round

    outcome = await call(registry, "get_current_time", {"timezone": "UTC"})
    assert not outcome.is_error, outcome.content
    assert outcome.tool is tool
    assert json.loads(outcome.result["text"])["timezone"] == "UTC"
    assert outcome.result["structured"]["timezone"] == "UTC"

    again = await call(registry, mcp.ACTIVATE_TOOL, {"name": "get_current_time"})
    assert again.result["already_active"] is True
    listed = await call(registry, mcp.LIST_TOOLS_TOOL, {"server": "time"})
    assert {t["name"]: t["active"] for t in listed.result["tools"]}["get_current_time"] is True

    # per turn: the next turn starts from the base again; the base never changes
    assert "get_current_time" not in surface.turn_registry(base)
    assert "get_current_time" not in base and mcp.ACTIVATE_TOOL not in base


async def test_prefix_and_annotation_overrides(started: Started) -> None:
    overrides: dict[str, dict[str, bool]] = {
        "get_current_time": {"readOnlyHint": False},
        "clock_get_current_time": {"open_world_hint": True},
        "convert_time": {"bogusHint": True},
    }
    seat = await seat_with(started, time_server("clock", prefix="clock_", annotations=overrides))
    registry = seat.surface().turn_registry(tools.ToolRegistry())
    listed = await call(registry, mcp.LIST_TOOLS_TOOL, {"server": "clock"})
    assert {t["name"] for t in listed.result["tools"]} == {"clock_get_current_time", "clock_convert_time"}
    # the bare name also activates it
    activated = await call(registry, mcp.ACTIVATE_TOOL, {"name": "get_current_time"})
    assert activated.result["activated"] == "clock_get_current_time"
    tool = registry.get("clock_get_current_time")
    assert tool is not None and tool.origin == "mcp:clock"
    assert tool.annotations == tools.ToolAnnotations(
        read_only="no", destructive="no", idempotent="yes", open_world="yes"
    )
    assert tool.delivers and tool.fenced  # not positively read-only (CO-23)
    outcome = await call(registry, "clock_get_current_time", {"timezone": "Europe/Paris"})
    assert not outcome.is_error, outcome.content


async def test_absent_hints_stay_unknown(started: Started) -> None:
    seat = await seat_with(started, tiny())
    registry = seat.surface().turn_registry(tools.ToolRegistry())
    await call(registry, mcp.ACTIVATE_TOOL, {"name": "sleep"})
    await call(registry, mcp.ACTIVATE_TOOL, {"name": "echo"})
    sleep, echo = registry.get("sleep"), registry.get("echo")
    assert sleep is not None and echo is not None
    assert sleep.annotations == tools.ToolAnnotations()  # all unknown, never "no"
    assert echo.annotations.read_only == "yes" and echo.annotations.destructive == "unknown"


def test_hint_override_names() -> None:
    assert mcp.hint_overrides(
        {"readOnlyHint": True, "destructive_hint": False, "idempotent": True, "openWorld": False, "x": True}
    ) == {"read_only": "yes", "destructive": "no", "idempotent": "yes", "open_world": "no"}


async def test_mcp_failures_are_error_results_never_crashes(started: Started) -> None:
    seat = await seat_with(started, tiny(request=30), server("ghost", "crewlet-no-such-command-xyz"))
    surface = seat.surface()
    assert surface.servers() == ["tiny"]
    assert "command not found" in surface.failures()["ghost"]
    registry = surface.turn_registry(tools.builtin_tools())

    unknown = await call(registry, mcp.LIST_TOOLS_TOOL, {"server": "nope"})
    assert unknown.is_error and "no MCP server named 'nope'" in (unknown.error or "")
    failed = await call(registry, mcp.LIST_TOOLS_TOOL, {"server": "ghost"})
    assert failed.is_error and failed.error_code == "mcp_server_unavailable"
    assert "command not found" in (failed.error or "")
    missing = await call(registry, mcp.ACTIVATE_TOOL, {"name": "no_such_tool"})
    assert missing.is_error and missing.error_code == "refused"

    for name in ("garble", "fail", "echo"):
        await call(registry, mcp.ACTIVATE_TOOL, {"name": name})
    garbage = await call(registry, "garble", {})
    assert garbage.is_error and garbage.error_code == "mcp_server_garbage"
    failing = await call(registry, "fail", {"message": "quota exceeded"})
    assert failing.is_error and failing.error_code == "mcp_tool_error"
    assert "quota exceeded" in (failing.error or "")
    bad_args = await call(registry, "echo", {"text": 5})
    assert bad_args.is_error and bad_args.error_code == "invalid_arguments"

    session = seat.session("tiny")
    assert session is not None and session.pid is not None
    os.kill(session.pid, signal.SIGKILL)
    dead = await call(registry, "echo", {"text": "hello"})
    assert dead.is_error and dead.error_code == "mcp_server_unavailable"
    assert "'tiny'" in (dead.error or "")


async def test_a_name_taken_on_the_surface_needs_a_prefix(started: Started) -> None:
    async def handler(args: dict[str, Any], ctx: tools.ToolContext) -> str:
        return "builtin"

    base = tools.ToolRegistry([tools.Tool("echo", "a built-in echo", {"type": "object"}, handler)])
    seat = await seat_with(started, tiny())
    registry = seat.surface().turn_registry(base)
    clash = await call(registry, mcp.ACTIVATE_TOOL, {"name": "echo"})
    assert clash.is_error and "needs a tool_prefix" in (clash.error or "")
    assert registry.get("echo") is base.get("echo")


async def test_the_same_tool_name_on_two_servers_needs_the_server(started: Started) -> None:
    seat = await seat_with(started, tiny("a"), tiny("b"))
    registry = seat.surface().turn_registry(tools.ToolRegistry())
    ambiguous = await call(registry, mcp.ACTIVATE_TOOL, {"name": "echo"})
    assert ambiguous.is_error and "pass server" in (ambiguous.error or "")
    chosen = await call(registry, mcp.ACTIVATE_TOOL, {"name": "echo", "server": "b"})
    assert not chosen.is_error
    tool = registry.get("echo")
    assert tool is not None and tool.origin == "mcp:b"


async def test_names_a_model_api_refuses_are_made_safe(started: Started) -> None:
    seat = await seat_with(started, tiny(prefix="t."))
    registry = seat.surface().turn_registry(tools.ToolRegistry())
    listed = await call(registry, mcp.LIST_TOOLS_TOOL, {"server": "tiny"})
    assert "t_text_upper" in {t["name"] for t in listed.result["tools"]}
    activated = await call(registry, mcp.ACTIVATE_TOOL, {"name": "text.upper"})
    assert activated.result["activated"] == "t_text_upper"
    outcome = await call(registry, "t_text_upper", {"text": "shout"})
    assert not outcome.is_error, outcome.content
    assert outcome.result["text"] == "SHOUT"


async def test_no_servers_no_meta_tools() -> None:
    surface = mcp.SeatTools("ada").surface()
    assert surface.servers() == []
    registry = surface.turn_registry(tools.builtin_tools())
    assert registry.names() == tools.builtin_tools().names()
