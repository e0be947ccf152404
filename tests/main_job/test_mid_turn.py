"""A node stopped in the middle of a turn, on the embedded broker with a 3 s lease TTL and a 5 s
mailbox ack window, restarted on the same store and node id.

- Drained (SIGTERM): admission stops at once, the running turn finishes and is acked, the node
  exits 0; the tracker wake that turn published while draining is worked by the next incarnation.
- Killed (SIGKILL): the delivery the dead incarnation fetched is redelivered after the ack window
  and worked once; the completion ledger then makes a second copy of the same trigger a skip (no
  model call, no turn, no second item).
"""

from __future__ import annotations

import json
import signal
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from tests.support.llm_servers import Reply, openai_tools
from tests.support.procs import Node, free_port

from .llm import OpenAIRouted
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
from .wire import OPENAI

ENV = {"GITHUB_WEBHOOK_SECRET": SECRET}


def _files(tmp_path: Path, llm: OpenAIRouted) -> tuple[list[str], int]:
    company = company_with_provider(tmp_path / "company.yaml", OPENAI.entry(llm))
    port = free_port()
    node_path = fault_node_file(tmp_path / "n", node_id="mid-1", port=port)
    return ["node", "--node", str(node_path), "--company", str(company)], port


def _create(assignee: str | None, *, delay: float = 0.0) -> Reply:
    args: dict[str, Any] = {"project": "SUP", "title": f"GitHub: {issue_title()}"}
    if assignee:
        args["assignee"] = assignee
    reply = openai_tools(("create_work_item", args))
    reply.delay = delay
    return reply


def _submit(summary: str) -> Reply:
    return openai_tools(("submit_work", {"outcome": "delivered", "summary": summary}))


def test_drained_mid_turn_finishes_the_turn(start_node: Callable[..., Node], tmp_path: Path) -> None:
    scripts = {
        "triage": [_create("lead", delay=3.0), _submit("Filed SUP-1")],
        "lead": [
            openai_tools(("update_work_item", {"key": "SUP-1", "status": "in_progress"})),
            _submit("Started SUP-1"),
        ],
    }
    with OpenAIRouted(scripts) as llm:
        argv, port = _files(tmp_path, llm)
        first = start_node(*argv, name="first", port=port, env=ENV)
        first.wait_ready()
        r = post_github(first)
        assert r.status_code == 202, r.text
        event_id = r.json()["event_id"]
        llm.wait_requests("triage", 1)  # the turn is in its first round (answered in 3 s)

        first.signal(signal.SIGTERM)
        # draining: new work is refused with Retry-After while the running turn goes on
        ready = wait_for("draining", lambda: (x := first.get("/ready", token=None)).status_code == 503 and x)
        assert isinstance(ready, httpx.Response) and ready.json()["draining"] is True
        refused = post_github(first)
        assert refused.status_code == 503 and refused.json()["error"] == "draining", refused.text
        assert refused.headers["retry-after"] == "5"
        assert first.wait(30) == 0, first.output()[-4000:]

        completed = [e for e in first.events() if e.get("event") == "agent_turn_completed"]
        assert [(e["seat"], e["outcome"]) for e in completed] == [("triage", "delivered")], first.output()[
            -4000:
        ]
        second_round = llm.requests("triage")[1].body
        (created,) = OPENAI.results(second_round)
        assert not created.is_error and created.content["key"] == "SUP-1"

        # the next incarnation: the drained turn is not run again; the wake it left is worked
        second = start_node(*argv, name="second", port=port, env=ENV)
        second.wait_ready()
        broker = Broker(tmp_path / "n" / "store")

        def lead_done() -> list[dict[str, Any]] | None:
            rows = [t for t in turns_of(second, seat="lead") if t["outcome"] != "running"]
            return rows or None

        (lead,) = wait_for("the lead's turn on the next incarnation", lead_done, timeout=20, node=second)
        assert lead["outcome"] == "delivered" and lead["work_item"] == "SUP-1"
        triage = turns_of(second, seat="triage")
        assert [(t["trigger_id"], t["outcome"]) for t in triage] == [(event_id, "delivered")]
        state = broker.inbox("triage")  # acked by the drained node: nothing waits for a redelivery
        assert (state["pending"], state["ack_pending"], state["redelivered"]) == (0, 0, 0)
        assert len(llm.requests("triage")) == 2
        item = second.get("/work/SUP-1").json()
        assert item["status"] == "in_progress" and item["assignee"] == "lead"
        assert second.get("/work?project=SUP").json()["count"] == 1


def test_killed_mid_turn_is_redelivered_and_worked_once(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    # the first answer never comes: the node is killed while it waits for it
    with OpenAIRouted({"triage": [Reply({"never": "sent"}, delay=60.0)]}) as llm:
        argv, port = _files(tmp_path, llm)
        first = start_node(*argv, name="first", port=port, env=ENV)
        first.wait_ready()
        delivery = "killed-mid-turn-0001"
        r = post_github(first, delivery=delivery)
        assert r.status_code == 202, r.text
        event_id = r.json()["event_id"]
        llm.wait_requests("triage", 1)
        (running,) = wait_for("the running turn", lambda: turns_of(first, seat="triage"), node=first)
        assert running["outcome"] == "running" and running["trigger_id"] == event_id

        first.signal(signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL
        llm.add("triage", _create(None), _submit("Filed SUP-1"))

        second = start_node(*argv, name="second", port=port, env=ENV)
        second.wait_ready()
        broker = Broker(tmp_path / "n" / "store")

        def completed() -> list[dict[str, Any]] | None:
            rows = [
                t for t in turns_of(second, seat="triage") if t["outcome"] not in ("running", "abandoned")
            ]
            return rows or None

        # redelivered after the ack window (5 s) once the dead incarnation's lease lapsed (3 s)
        (done,) = wait_for("the redelivered turn", completed, timeout=30, node=second)
        assert done["trigger_id"] == event_id and done["outcome"] == "delivered"
        assert done["work_key"] == running["work_key"] and done["turn_id"] != running["turn_id"]
        rows = turns_of(second, seat="triage")
        assert sorted((t["turn_id"], t["outcome"]) for t in rows) == sorted(
            [(running["turn_id"], "abandoned"), (done["turn_id"], "delivered")]
        )  # the dead incarnation's row, in the same node.db, is marked abandoned when the node reopens it
        redelivery = llm.requests("triage")[1].body
        assert OPENAI.results(redelivery) == []  # a fresh turn, not a continuation
        assert second.get("/work?project=SUP").json()["count"] == 1
        assert f"triage.{event_id}" in broker.kv_keys("ledger")
        state = broker.inbox("triage")
        assert state["ack_pending"] == 0 and state["pending"] == 0 and state["redelivered"] == 0

        # a second copy of the same trigger (as a lost ack would bring back): the ledger skips it
        requests, published = len(llm.requests()), broker.last_seq()
        envelope = {
            "id": event_id,
            "type": "external_notification",
            "timestamp": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "source": "webhook:github",
            "payload": {
                "source": "webhook:github",
                "text": issue_title(),
                "event": "issues",
                "delivery": delivery,
            },
            "delegation_depth": 0,
        }
        seq = broker.publish(
            "crewlet.agent.triage.inbox", json.dumps(envelope).encode(), {"Nats-Msg-Id": str(uuid.uuid4())}
        )
        assert seq == published + 1
        skipped = wait_for(
            "turn_trigger_skipped",
            lambda: [e for e in second.events() if e.get("event") == "turn_trigger_skipped"],
            node=second,
        )
        assert [(e["seat"], e["event_id"], e["reason"]) for e in skipped] == [
            ("triage", event_id, "already_worked")
        ]
        wait_for("the copy acked", lambda: broker.inbox("triage")["ack_pending"] == 0)
        assert len(llm.requests()) == requests
        assert [t["turn_id"] for t in turns_of(second, seat="triage") if t["outcome"] != "abandoned"] == [
            done["turn_id"]
        ]
        assert second.get("/work?project=SUP").json()["count"] == 1
