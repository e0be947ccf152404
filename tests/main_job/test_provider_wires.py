"""The golden path again with the real HTTP provider clients: ``openai-compatible`` against a
scripted Chat Completions server and ``anthropic`` against a scripted Messages server, both on
loopback. The scripts make the triage seat file the GitHub issue for the lead and the lead move
it on and comment, through real tool calls; the test reads back what landed in the tracker and
what the node sent the model (the tool surface, the tool results of the second round)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from shared.tools import BUILTIN_TOOL_NAMES
from tests.support.llm_servers import Reply
from tests.support.procs import Node, free_port

from .support import (
    SECRET,
    Broker,
    company_with_provider,
    fault_node_file,
    issue_title,
    post_github,
    turns_of,
    wait_for,
)
from .wire import ANTHROPIC, OPENAI, Wire


def golden_scripts(wire: Wire) -> dict[str, list[Any]]:
    """Triage files the issue for the lead; the lead starts it and comments; both submit."""
    title = f"GitHub: {issue_title()}"

    def triage_submit(body: Any) -> Reply:
        created = wire.results(body)[-1].content
        return wire.tools(("submit_work", {"outcome": "delivered", "summary": f"Filed {created['key']}"}))

    return {
        "triage": [
            wire.tools(
                (
                    "create_work_item",
                    {
                        "project": "SUP",
                        "type": "bug",
                        "title": title,
                        "body": "Reported on GitHub; needs a look.",
                        "assignee": "lead",
                    },
                )
            ),
            triage_submit,
        ],
        "lead": [
            wire.tools(
                ("update_work_item", {"key": "SUP-1", "status": "in_progress"}),
                ("comment_on_work_item", {"key": "SUP-1", "body": "Accepted; fixing the README typo."}),
            ),
            wire.tools(("submit_work", {"outcome": "delivered", "summary": "Started SUP-1"})),
        ],
    }


@pytest.mark.parametrize("wire", [OPENAI, ANTHROPIC], ids=lambda w: w.name)
def test_golden_path_over_a_real_provider_wire(
    wire: Wire, start_node: Callable[..., Node], tmp_path: Path
) -> None:
    with wire.server(golden_scripts(wire)) as llm:
        company = company_with_provider(tmp_path / "company.yaml", wire.entry(llm))
        port = free_port()
        node_path = fault_node_file(tmp_path / "n", node_id="wire-1", port=port)
        node = start_node(
            "node",
            "--node",
            str(node_path),
            "--company",
            str(company),
            port=port,
            env={"GITHUB_WEBHOOK_SECRET": SECRET},
        )
        node.wait_ready()
        delivery = "wire-delivery-0001"
        r = post_github(node, delivery=delivery)
        assert r.status_code == 202, r.text
        trace_id = r.json()["trace_id"]

        def both_done() -> list[dict[str, Any]] | None:
            rows = turns_of(node)
            return rows if len([t for t in rows if t["outcome"] != "running"]) == 2 else None

        rows = wait_for("two finished turns", both_done, timeout=20, node=node)
        by_seat = {t["seat"]: t for t in rows}
        assert {s: t["outcome"] for s, t in by_seat.items()} == {"triage": "delivered", "lead": "delivered"}
        for seat, row in by_seat.items():
            assert row["trace_id"] == trace_id, seat
            # two executor rounds and the review's (CO-30), each 100/10 tokens
            assert row["provider_key"] == "default" and row["rounds"] == 3, seat
            assert row["model"] in ("scripted-model", "scripted-claude"), seat
            assert row["tokens"]["input"] == 300 and row["tokens"]["output"] == 30, seat
            assert row["work_item"] == "SUP-1", seat

        item = node.get("/work/SUP-1").json()
        assert item["title"] == f"GitHub: {issue_title()}" and item["type"] == "bug"
        assert item["reporter"] == "seat:triage" and item["assignee"] == "lead"
        assert item["status"] == "in_progress"
        assert [(c["author"], c["body"]) for c in item["comments"]] == [
            ("seat:lead", "Accepted; fixing the README typo.")
        ]
        assert node.get("/work?project=SUP").json()["count"] == 1

        # what the real client sent: the key, the whole tool surface, the trigger, tool results
        triage_reqs, lead_reqs = llm.requests("triage"), llm.requests("lead")
        assert len(triage_reqs) == 2 and len(lead_reqs) == 2
        first = triage_reqs[0]
        assert wire.auth(first.headers) == "test-key"
        assert wire.tool_names(first.body) == [*BUILTIN_TOOL_NAMES, "refresh_memory"]  # AG-8
        schema = wire.tool_schema(first.body, "create_work_item")
        assert schema["required"] == ["project", "title"] and "assignee" in schema["properties"]
        assert issue_title() in wire.user_text(first.body)
        assert wire.results(first.body) == []
        (created,) = wire.results(triage_reqs[1].body)
        assert created.call_id == wire.call_ids(triage_reqs[1].body)[0]
        assert not created.is_error and created.content["key"] == "SUP-1"
        assert created.content["assignee"] == "lead"
        assert "SUP-1" in wire.user_text(lead_reqs[0].body)  # the wake names the item
        lead_results = wire.results(lead_reqs[1].body)
        assert [x.call_id for x in lead_results] == wire.call_ids(lead_reqs[1].body)
        assert [x.is_error for x in lead_results] == [False, False]
        assert lead_results[0].content["status"] == "in_progress"
        if wire is ANTHROPIC:
            assert first.headers["anthropic-version"] == "2023-06-01"
            assert first.body["system"][0]["cache_control"] == {"type": "ephemeral"}
            assert first.body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
        else:
            assert first.body["model"] == "scripted-model"
            assert first.body["messages"][0]["role"] == "system"

        # the replay publishes nothing, so nothing can run: no third turn, no more model calls
        broker = Broker(tmp_path / "n" / "store")
        published = broker.last_seq()
        r = post_github(node, delivery=delivery)
        assert r.status_code == 200 and r.json()["status"] == "duplicate"
        assert broker.last_seq() == published
        assert len(turns_of(node)) == 2 and len(llm.requests()) == 4
