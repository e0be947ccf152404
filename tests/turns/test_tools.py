"""The tool registry, capability model and built-ins (CO-23..CO-26)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from shared import tools
from shared.providers import ToolCall
from tests.turns.helpers import example_data, make_org
from tests.turns.workspace import Estate


def _ctx(estate: Estate | None = None, seat: str = "triage", org: Any = None) -> tools.ToolContext:
    return tools.ToolContext(seat, (estate or Estate()).workspace(seat), org)


async def _call(
    name: str, args: Any, ctx: tools.ToolContext, surface: tools.ToolRegistry | None = None
) -> tools.ToolOutcome:
    return await (surface or tools.builtin_tools()).execute(ToolCall("c1", name, args), ctx)


def test_builtin_catalogue_snapshot() -> None:
    # CO-23's schema snapshot: names, order, required arguments, capability flags.
    snapshot = {
        t.name: (sorted(t.parameters.get("required", [])), t.writes, t.delivers_to, t.annotations.read_only)
        for t in tools.builtin_tools()
    }
    assert snapshot == {
        "list_work_items": ([], False, None, "yes"),
        "get_work_item": (["key"], False, None, "yes"),
        "create_work_item": (["project", "title"], True, "work", "no"),
        "update_work_item": (["key"], True, "work", "no"),
        "comment_on_work_item": (["body", "key"], True, "work", "no"),
        "search_knowledge": (["query"], False, None, "yes"),
        "get_page": (["space", "title"], False, None, "yes"),
        "write_page": (["body", "space", "title"], True, "page", "no"),
        "list_files": (["project"], False, None, "yes"),
        "read_file": (["path", "project"], False, None, "yes"),
        "write_file": (["content", "path", "project"], True, "file", "no"),
        "lookup_colleague": (["query"], False, None, "yes"),
        "reflect_and_persist": (["content"], False, None, "no"),
        "query_episodes": (["query"], False, None, "yes"),
        "a2a_ask": (["brief", "handle"], True, None, "no"),
        "submit_work": (["outcome", "summary"], False, None, "yes"),
    }
    assert tools.BUILTIN_TOOL_NAMES == tuple(snapshot)
    for tool in tools.builtin_tools():
        assert tool.parameters["type"] == "object" and tool.parameters["additionalProperties"] is False
        json.dumps(tool.parameters)  # every definition is plain JSON


@pytest.mark.parametrize(
    ("origin", "delivers_to", "read_only", "delivers", "fenced"),
    [
        ("builtin", "work", "no", True, True),
        ("builtin", None, "yes", False, False),
        ("builtin", None, "unknown", False, False),
        ("mcp:gh", None, "yes", False, False),
        ("mcp:gh", None, "no", True, True),
        ("mcp:gh", None, "unknown", True, True),  # unknown is never treated as no (CO-23)
    ],
)
def test_delivery_classification(
    origin: str, delivers_to: Any, read_only: Any, delivers: bool, fenced: bool
) -> None:
    async def noop(args: dict[str, Any], ctx: tools.ToolContext) -> Any:
        return {}

    tool = tools.Tool(
        "t",
        "d",
        {"type": "object"},
        noop,
        writes=delivers_to is not None,
        delivers_to=delivers_to,
        origin=origin,
        annotations=tools.ToolAnnotations(read_only=read_only),
    )
    assert (tool.delivers, tool.fenced) == (delivers, fenced)


def test_schema_validator_subset() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 1},
            "s": {"type": "string", "enum": ["a", "b"]},
            "k": {"type": "string", "pattern": "^[A-Z]+$"},
            "xs": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
        },
        "required": ["n"],
        "additionalProperties": False,
    }
    v = tools.validate_arguments
    assert v({"n": 1, "s": "a", "k": "AB", "xs": ["x"]}, schema) == []
    assert v({"n": True}, schema) == ["n: expected integer, got bool"]
    assert v({"n": 1.0}, schema) == ["n: expected integer, got float"]
    assert v({}, schema) == ["n: required"]
    assert v({"n": 0, "s": "c", "k": "ab", "xs": ["x", 2, "z"], "extra": 1}, schema) == [
        "n: 0 is below the minimum 1",
        "s: 'c' is not one of 'a', 'b'",
        "k: 'ab' does not match ^[A-Z]+$",
        "xs: more than 2 items",
        "xs[1]: expected string, got int",
        "extra: not an argument of this tool (known: n, s, k, xs)",
    ]
    assert v([], schema) == ["arguments: expected object, got list"]


def test_registry_refuses_a_duplicate_name() -> None:
    surface = tools.builtin_tools()
    with pytest.raises(tools.ToolRegistryError):
        surface.add(tools.submit_work_tool())


async def test_workspace_refusals_are_results() -> None:
    ctx = _ctx()
    bad_type = await _call("create_work_item", {"project": "SUP", "title": "x", "type": "Bug"}, ctx)
    assert bad_type.is_error and bad_type.error_code == "refused" and "declared" in (bad_type.error or "")
    assert json.loads(bad_type.content)["field"] == "type"
    missing = await _call("get_work_item", {"key": "SUP-404"}, ctx)
    assert missing.error_code == "not_found"
    await _call("create_work_item", {"project": "SUP", "title": "x"}, ctx)
    stale = await _call("update_work_item", {"key": "SUP-1", "status": "done", "if_match": 7}, ctx)
    assert stale.error_code == "conflict" and "version 1" in (stale.error or "")
    assert [t["key"] for t in ctx.touched] == ["SUP-1"]  # only successful writes count (CO-19)


async def test_assignee_me_means_the_calling_seat() -> None:
    estate = Estate()
    ctx = _ctx(estate, seat="lead")
    await _call("create_work_item", {"project": "ENG", "title": "mine", "assignee": "me"}, ctx)
    listed = await _call("list_work_items", {"assignee": "me", "limit": 1}, ctx)
    assert estate.items["ENG-1"]["assignee"] == "lead"
    assert listed.result["count"] == 1 and listed.result["items"][0]["key"] == "ENG-1"


async def test_file_tools_text_only_and_safe_paths() -> None:
    estate = Estate()
    ctx = _ctx(estate)
    wrote = await _call("write_file", {"project": "SUP", "path": "notes/a.md", "content": "héllo"}, ctx)
    assert not wrote.is_error and wrote.delivered and wrote.result["size"] == 6
    read = await _call("read_file", {"project": "SUP", "path": "notes/a.md"}, ctx)
    assert read.result["content"] == "héllo"
    estate.files[("SUP", "logo.png")] = b"\x89PNG\r\n\x1a\n\xff\xfe"
    binary = await _call("read_file", {"project": "SUP", "path": "logo.png"}, ctx)
    assert binary.is_error and "binary (10 bytes, image/png)" in (binary.error or "")
    for path in ("../etc/passwd", "/abs", "a//b"):
        refused = await _call("write_file", {"project": "SUP", "path": path, "content": "x"}, ctx)
        assert refused.is_error and json.loads(refused.content)["field"] == "path"
    listed = await _call("list_files", {"project": "SUP", "prefix": "notes/"}, ctx)
    assert [f["path"] for f in listed.result["files"]] == ["notes/a.md"]


async def test_search_never_raises_to_the_model() -> None:
    ctx = _ctx()

    async def fail(q: str, space: str | None = None, **kw: Any) -> dict[str, Any]:
        raise ConnectionError("index gone")

    ctx.workspace.search_pages = fail  # type: ignore[method-assign]
    out = await _call("search_knowledge", {"query": "crash"}, ctx)
    assert not out.is_error and out.result == {
        "hits": [],
        "searched": False,
        "error": "ConnectionError: index gone",
    }


async def test_lookup_colleague() -> None:
    org = make_org(example_data())
    ctx = _ctx(org=org)
    exact = await _call("lookup_colleague", {"query": "@rui-lanternfish"}, ctx)
    assert exact.result["match"]["handle"] == "founder" and exact.result["match"]["kind"] == "human"
    by_name = await _call("lookup_colleague", {"query": "docs writer"}, ctx)
    assert by_name.result["match"]["handle"] == "docs" and by_name.result["match"]["managers"] == ["lead"]
    fuzzy = await _call("lookup_colleague", {"query": "e"}, ctx)
    assert fuzzy.result["match"] is None and len(fuzzy.result["candidates"]) > 1


async def test_submit_work_blocked_needs_evidence() -> None:
    ctx = _ctx()
    refused = await _call("submit_work", {"outcome": "blocked", "summary": "stuck"}, ctx)
    assert refused.is_error and ctx.submission is None
    ok = await _call("submit_work", {"outcome": "blocked", "summary": "stuck", "evidence": "no access"}, ctx)
    assert not ok.is_error and ctx.submission is not None and ctx.submission.outcome == "blocked"


async def test_a_slow_handler_becomes_a_timeout_result() -> None:
    async def slow(args: dict[str, Any], ctx: tools.ToolContext) -> Any:
        await asyncio.sleep(30)

    surface = tools.ToolRegistry(
        [tools.Tool("slow", "Slow.", {"type": "object"}, slow, timeout_seconds=0.01)]
    )
    out = await _call("slow", {}, _ctx(), surface)
    assert out.is_error and out.error_code == "timeout"
