"""``a2a_ask`` through the built-in surface, on a real nats-server (CO-36, CO-11 depth cap).

The example company: agent seats ``lead``, ``dev``, ``docs``, ``triage``; ``founder`` is a person;
``turn_engine.delegation_depth_limit`` is 3.
"""

from __future__ import annotations

import json
from typing import Any, cast

from shared import channels, tools
from shared.providers import ToolCall
from shared.tools import ToolContext, ToolOutcome
from tests.turns.helpers import example_org
from tests.turns.workspace import Estate

from .conftest import Kit


def _ctx(seat: str = "lead") -> ToolContext:
    workspace = cast(tools.Workspace, Estate().workspace(seat))  # a2a_ask never touches it
    return ToolContext(seat, workspace, example_org(), "turn-1")


async def _ask(ctx: ToolContext, **args: Any) -> ToolOutcome:
    return await tools.builtin_tools().execute(ToolCall("c1", "a2a_ask", args), ctx)


def _scope(kit: Kit, **kw: Any) -> channels.AskScope:
    return channels.AskScope(coord=kit.coord, bus=kit.bus, work_key="wk-7", trace_headers={}, **kw)


def test_a2a_ask_is_a_fenced_builtin_that_delivers_nowhere() -> None:
    tool = tools.builtin_tools().get("a2a_ask")
    assert tool is not None and tools.BUILTIN_TOOL_NAMES[-2:] == ("a2a_ask", "submit_work")
    assert tool.fenced and not tool.delivers and tool.parameters["required"] == ["handle", "brief"]


async def test_ask_opens_a_channel_and_wakes_the_target(kit: Kit) -> None:
    ctx = _ctx()
    ctx.touch("ENG-2", {"id": "item-2"})  # no item on the trigger: the one the turn wrote is the asker's
    with channels.bind(_scope(kit)):
        out = await _ask(ctx, handle="@dev", brief="  Is ENG-2 reproducible on main?  ")
        again = await _ask(ctx, handle="dev", brief="Is ENG-2 reproducible on main?")
    assert not out.is_error, out.content
    assert out.result["status"] == "open" and out.result["delegation_depth"] == 1
    assert not out.result["already_asked"] and again.result["already_asked"]
    assert again.result["channel_id"] == out.result["channel_id"]
    row = await channels.get_channel(kit.coord, out.result["channel_id"])
    assert row is not None
    assert (row.requester, row.target, row.brief, row.asker_turn_id) == (
        "lead",
        "dev",
        "Is ENG-2 reproducible on main?",
        "turn-1",
    )
    assert row.asker_work_item == {"key": "ENG-2", "id": "item-2", "project": "ENG"}
    [(env, _)] = await kit.inbox("dev")
    assert (env.type, env.delegation_depth, env.delegation_chain, env.payload["reply_mode"]) == (
        "a2a_request",
        1,
        ["lead"],
        "engine",
    )


async def test_refusals_name_the_field_and_code(kit: Kit) -> None:
    ctx = _ctx()
    with channels.bind(_scope(kit)):
        cases = {
            "unknown_seat": await _ask(ctx, handle="nobody", brief="hi"),
            "self_ask": await _ask(ctx, handle="lead", brief="hi"),
            "human_seat": await _ask(ctx, handle="founder", brief="hi"),
            "invalid_arguments": await _ask(ctx, handle="dev", brief="   "),
        }
    for code, out in cases.items():
        body = json.loads(out.content)
        assert out.is_error and out.error_code == code, (code, out.content)
        assert body["field"] == ("brief" if code == "invalid_arguments" else "handle")
    with channels.bind(_scope(kit)):
        huge = await _ask(ctx, handle="dev", brief="x" * 32_001)  # larger than an API message may be
    assert huge.is_error and huge.error_code == "invalid_arguments" and "brief" in huge.content
    assert "32000" in huge.content
    no_scope = await _ask(ctx, handle="dev", brief="hi")  # a turn run without a dispatcher's bus
    assert no_scope.is_error and no_scope.error_code == "unavailable"
    assert await channels.list_channels(kit.coord) == [] and await kit.inbox("dev") == []


async def test_depth_cap_refuses_the_third_hop(kit: Kit) -> None:
    # lead (depth 0) asked dev (1), dev asked docs (2): docs asking triage would land at 3 = the limit
    ctx = _ctx("docs")
    with channels.bind(_scope(kit, delegation_depth=2, delegation_chain=("lead", "dev"))):
        out = await _ask(ctx, handle="triage", brief="Who filed SUP-1?")
    assert out.is_error and out.error_code == "depth_cap"
    assert "lead -> dev -> docs" in (out.error or "")
    assert await channels.list_channels(kit.coord) == [] and await kit.inbox("triage") == []
    # one hop less is allowed: dev at depth 1 asks docs, which arrives at 2
    with channels.bind(_scope(kit, delegation_depth=1, delegation_chain=("lead",))):
        ok = await _ask(_ctx("dev"), handle="docs", brief="Release notes?")
    assert not ok.is_error and ok.result["delegation_depth"] == 2
    [(env, _)] = await kit.inbox("docs")
    assert env.delegation_chain == ["lead", "dev"] and env.payload["delegation_chain"] == ["lead", "dev"]
