"""A seat with a real MCP tool server (CO-34, FL-46, FL-65, FL-66): ``mcp-server-time`` from PyPI as
a per-seat stdio server of a running node, driven by a scripted model over the real provider wire.

- the turn lists the server's tools, activates ``get_current_time`` (it is on the surface from the
  next round, not before) and calls it; the turn record shows the MCP call with its origin;
- the heartbeat row on ``GET /fleet`` says the server started, and a second server whose command
  does not exist is named there as failed while the seat still runs (FL-46);
- an apply that moves one seat's ``mcp_env`` restarts that seat's child only (FL-115);
- draining the node stops the child, and so does ``kill -9`` of the node (checked by PID).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.llm_servers import Reply
from tests.support.procs import TOKEN, Node, free_port, pid_alive

from .llm import OpenAIRouted
from .support import company_with_provider, fault_node_file, post_message, wait_for
from .wire import OPENAI

TIME_SERVER = str(Path(sys.executable).parent / "mcp-server-time")


def _time_children() -> list[int]:
    """Every live ``mcp-server-time`` process on the machine started from this venv."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(a.decode(errors="replace").endswith("mcp-server-time") for a in argv) and pid_alive(
            int(d.name)
        ):
            out.append(int(d.name))
    return out


def _company(tmp_path: Path, llm: OpenAIRouted) -> Path:
    servers = [
        {"name": "time", "command": TIME_SERVER, "args": ["--local-timezone", "UTC"]},
        {"name": "ghost", "command": str(tmp_path / "no-such-mcp-server"), "startup_timeout_seconds": 5},
    ]
    return company_with_provider(tmp_path / "company.yaml", OPENAI.entry(llm), mcp_servers=servers)


def _script(seen: list[Any]) -> Callable[[str, Any], Reply]:
    """The model: list the time server's tools, activate get_current_time, call it, submit."""

    def respond(seat: str, body: Any) -> Reply:
        seen.append(body)
        results = [m for m in body["messages"] if m["role"] == "tool"]
        step = len(results)
        if step == 0:
            return OPENAI.tools(("list_mcp_server_tools", {"server": "time"}))
        if step == 1:
            return OPENAI.tools(("activate_tool", {"name": "get_current_time"}))
        if step == 2:
            return OPENAI.tools(("get_current_time", {"timezone": "UTC"}))
        return OPENAI.tools(("submit_work", {"outcome": "delivered", "summary": "told the time"}))

    return respond


def _boot(start_node: Callable[..., Node], tmp_path: Path, llm: OpenAIRouted, name: str) -> Node:
    port = free_port()
    node = start_node(
        "node",
        "--node",
        str(fault_node_file(tmp_path / name, node_id=f"mcp-{name}", port=port)),
        "--company",
        str(_company(tmp_path, llm)),
        port=port,
        name=name,
    )
    node.wait_ready()
    return node


def _mcp_rows(node: Node, node_id: str) -> list[dict[str, Any]]:
    view = node.get("/fleet").json()
    (me,) = [n for n in view["nodes"] if n["id"] == node_id]
    return list(me.get("mcp", []))


def test_a_seat_lists_activates_and_calls_an_mcp_tool_and_its_child_dies_with_the_seat(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    before = set(_time_children())
    seen: list[Any] = []
    with OpenAIRouted(respond=_script(seen)) as llm:
        node = _boot(start_node, tmp_path, llm, "one")
        doc = yaml.safe_load((tmp_path / "company.yaml").read_text())
        agents = sum(1 for u in doc["units"] for r in u["roles"] if r.get("kind", "agent") == "agent")

        def rows() -> dict[str, dict[str, Any]] | None:
            found = {r["server"]: r for r in _mcp_rows(node, "mcp-one")}
            return found if found.get("time", {}).get("started") == agents else None

        by_server = wait_for("the heartbeat carries the MCP start rows", rows, timeout=30, node=node)
        mine = set(_time_children()) - before
        assert len(mine) == agents  # one child per agent seat
        assert by_server["time"]["failed"] == 0
        assert by_server["ghost"]["started"] == 0 and by_server["ghost"]["failed"] >= 1
        assert "no-such-mcp-server" in by_server["ghost"]["reason"]

        sent = post_message(node, "triage", "What time is it?")
        assert sent.status_code == 202, sent.text
        message_id = sent.json()["message_id"]
        message = wait_for(
            "the message answered",
            lambda: (
                (m := node.get(f"/messages/{message_id}").json())["status"] in ("answered", "failed") and m
            ),
            timeout=60,
            node=node,
        )
        assert message["status"] == "answered", message
        record = node.get(f"/turns/{message['turn_id']}").json()["record"]
        calls = [(c["name"], c["origin"], c["is_error"]) for c in record["tool_calls"]]
        assert calls == [
            ("list_mcp_server_tools", "builtin", False),
            ("activate_tool", "builtin", False),
            ("get_current_time", "mcp:time", False),
            ("submit_work", "builtin", False),
            ("submit_review", "builtin", False),  # the reviewer's (CO-30)
        ], calls
        listed = json.loads(record["tool_calls"][0]["content"])
        assert "get_current_time" in json.dumps(listed)
        answer = record["tool_calls"][2]["content"]
        assert "UTC" in answer and "datetime" in answer, answer

        # the tool came onto the surface for the round after activate_tool, not before
        offered = [OPENAI.tool_names(b) for b in seen]
        assert "get_current_time" not in offered[0] and "get_current_time" not in offered[1]
        assert "get_current_time" in offered[2]
        assert "`time`" in seen[0]["messages"][0]["content"]  # the prompt names the server

        # FL-115: an apply restarts only the child whose resolved config moved (the lead's)
        doc["units"][0]["roles"][0]["mcp_env"] = {"time": {"TZ": "UTC"}}
        put = httpx.put(
            f"{node.url}/config",
            json=doc,
            headers={"Authorization": f"Bearer {TOKEN}", "X-Summary": "the lead's time server in UTC"},
            timeout=30,
        )
        assert put.status_code == 201, put.text
        after = wait_for(
            "the lead's server restarted",
            lambda: (now := set(_time_children()) - before) != mine and len(now) == len(mine) and now,
            timeout=30,
            node=node,
        )
        assert len(mine - after) == 1 and len(after - mine) == 1, (mine, after)  # one restart, the rest kept
        mine = after

        # drain: the node stops, and every child it started is gone
        node.signal(signal.SIGTERM)
        assert node.wait(60) == 0, node.output()[-3000:]
        wait_for(
            "the children stopped with the drain", lambda: not any(pid_alive(p) for p in mine), timeout=15
        )

        # kill -9: the children die with the node (they cannot outlive their seat's credentials)
        node2 = _boot(start_node, tmp_path, llm, "two")
        started = wait_for(
            "the restarted node's time servers", lambda: set(_time_children()) - before, node=node2
        )
        os.kill(node2.pid, signal.SIGKILL)
        node2.wait(10)
        wait_for(
            "the children died with the killed node",
            lambda: not any(pid_alive(p) for p in started),
            timeout=15,
        )
