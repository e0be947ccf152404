"""A single node's drain, on real node processes with a scripted model (FL-126..FL-131, CO-29, issue 17).

- A delivery the node held at SIGTERM (fetched, waiting behind ``node.max_concurrent`` while a slow
  turn runs) is returned by the drain so that the next incarnation on the same store takes it at
  once, before a message posted after the restart, although the mailbox's ack wait is 30 min.
- From the first moment of the drain every write answers 503 ``draining`` with ``Retry-After``,
  while reads answer 200 until the listener closes (the data role stops last); ``/ready``'s 503
  ``draining`` carries ``Retry-After`` too.
- While a drain runs, ``drain_in_progress`` reports the turns in flight at its interval (FL-129).
"""

from __future__ import annotations

import asyncio
import re
import signal
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import structlog

from crewlet._node_drain import report_drain as _report_drain
from tests.main_job.llm import OpenAIRouted
from tests.main_job.support import company_with_provider, post_message, wait_for
from tests.main_job.wire import OPENAI
from tests.support.llm_servers import Reply
from tests.support.procs import TOKEN, Node, free_port, node_file

_CASE = re.compile(r"case:([a-z]+)")
HOLD = 8.0
"""Seconds the scripted model takes to answer the ``hold`` case: the turn in flight at SIGTERM."""
ACK_WAIT = 1800.0
"""The mailboxes' ack wait (s): a delivery left unreturned would wait this long."""
PROMPT = 60.0
"""Seconds the next incarnation is given to run the returned delivery: well inside :data:`ACK_WAIT`."""


def _respond(seat: str, body: Any) -> Reply:
    if OPENAI.tool_names(body) == ["submit_review"]:  # the reviewer (CO-30) agrees
        return OPENAI.tools(("submit_review", {"decision": "done", "notes": "fine"}))
    match = _CASE.search(OPENAI.user_text(body))
    case = match.group(1) if match else "?"
    done = OPENAI.tools(("submit_work", {"outcome": "delivered", "summary": f"answered {case}"}))
    return Reply(done.body, delay=HOLD) if case == "hold" else done


def _argv(tmp_path: Path, llm: OpenAIRouted, port: int) -> list[str]:
    company = company_with_provider(tmp_path / "company.yaml", OPENAI.entry(llm, timeout_seconds=30.0))
    path = node_file(
        tmp_path / "n",
        node_id="drain-1",
        port=port,
        node={"id": "drain-1", "max_concurrent": 1},
        coordination={"lease_ttl_seconds": 3.0},
        stream={"ack_wait_seconds": ACK_WAIT},
        logging={"level": "debug"},  # inbox_fetched: the test knows the delivery is in hand
    )
    return ["node", "--node", str(path), "--company", str(company)]


def _send(node: Node, seat: str, case: str) -> str:
    r = post_message(node, seat, f"Please handle this. case:{case}")
    assert r.status_code == 202, r.text
    return str(r.json()["message_id"])


def _status(node: Node, message_id: str) -> str:
    r = node.get(f"/messages/{message_id}")
    assert r.status_code == 200, r.text
    return str(r.json()["status"])


def _cases(llm: OpenAIRouted, seat: str) -> list[str]:
    out = []
    for seen in llm.requests(seat):
        match = _CASE.search(OPENAI.user_text(seen.body))
        out.append(match.group(1) if match else "?")
    return out


def test_a_delivery_held_at_sigterm_is_taken_first_by_the_next_incarnation(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    with OpenAIRouted(respond=_respond) as llm:
        port = free_port()
        argv = _argv(tmp_path, llm, port)
        first = start_node(*argv, name="first", port=port)
        first.wait_ready()
        hold = _send(first, "lead", "hold")
        llm.wait_requests("lead", 1)  # the lead's turn holds the one slot for HOLD seconds
        held = _send(first, "dev", "first")

        def dev_fetched() -> bool:
            return any(e.get("event") == "inbox_fetched" and e.get("seat") == "dev" for e in first.events())

        wait_for("dev's delivery in hand, waiting for the slot", dev_fetched, node=first)
        first.signal(signal.SIGTERM)
        assert first.wait(60) == 0, first.output()[-4000:]
        events = first.events()
        # returned either by the handler (deferred: the node drains) or by the mailbox's detach
        deferred = [e for e in events if e.get("event") == "inbox_deferred" and e.get("seat") == "dev"]
        detached = [e for e in events if e.get("event") == "inbox_detached" and e.get("seat") == "dev"]
        returned = len(deferred) + sum(int(e["nacked"]) for e in detached)
        assert returned == 1, "the delivery in hand was not returned by the drain"
        assert all(e["left"] == 0 for e in detached)
        completed = [e for e in events if e.get("event") == "agent_turn_completed"]
        assert [(e["seat"], e["outcome"]) for e in completed] == [("lead", "delivered")]
        assert _cases(llm, "dev") == []  # never run by the drained incarnation

        second = start_node(*argv, name="second", port=port)
        second.wait_ready()
        later = _send(second, "dev", "later")
        wait_for(
            "the returned delivery answered", lambda: _status(second, held) == "answered", timeout=PROMPT
        )
        wait_for("the later message answered", lambda: _status(second, later) == "answered", timeout=PROMPT)
        assert _cases(llm, "dev") == ["first", "later"]  # in order: the returned one first
        assert _status(second, hold) == "answered"


def test_a_draining_node_refuses_writes_and_serves_reads(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with OpenAIRouted(respond=_respond) as llm:
        port = free_port()
        node = start_node(*_argv(tmp_path, llm, port), name="drain", port=port)
        node.wait_ready()
        _send(node, "lead", "hold")
        llm.wait_requests("lead", 1)  # a turn in flight keeps the drain open for HOLD seconds
        node.signal(signal.SIGTERM)
        # the signal is handled on the node's loop: from then on (its health says so) every write
        # is refused; the running turn keeps the drain open for seconds after
        wait_for("the drain", lambda: node.get("/health", token=None).json()["shutting_down"], node=node)
        writes: list[httpx.Response] = []
        reads: list[httpx.Response] = []
        probes: list[httpx.Response] = []
        with httpx.Client(base_url=node.url, headers=auth, timeout=10) as client:
            while node.popen.poll() is None:
                try:
                    writes.append(client.post("/work", json={"project": "SUP", "title": "during the drain"}))
                    writes.append(client.post("/seats/dev/messages", json={"text": "case:late"}))
                    reads.append(client.get("/work", params={"project": "SUP"}))
                    reads.append(client.get("/health"))
                    probes.append(client.get("/ready"))
                except httpx.TransportError:
                    break  # the listener closed
                time.sleep(0.05)
        assert node.wait(60) == 0, node.output()[-4000:]
        assert writes and reads
        for w in writes:
            assert w.status_code == 503 and w.json()["error"] == "draining", w.text
            assert w.headers["retry-after"] == "5"
        refused = [r.text for r in reads if r.status_code != 200]
        assert refused == [], f"{len(refused)} of {len(reads)} reads refused during the drain"
        assert any(r.json().get("shutting_down") for r in reads if r.url.path == "/health")
        for p in probes:  # a 503 the route gave no Retry-After gets the node's (issue 17)
            assert p.status_code == 503 and p.json()["reason"] == "draining", p.text
            assert p.headers["retry-after"] == "5"
        events = node.events()
        completed = [e for e in events if e.get("event") == "agent_turn_completed"]
        assert [(e["seat"], e["outcome"]) for e in completed] == [("lead", "delivered")]


async def test_a_drain_reports_the_turns_in_flight_at_its_interval() -> None:
    ctx: Any = SimpleNamespace(in_flight=2, seats_held={"lead": 3})
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(_report_drain(ctx, every=0.05))
        while len([e for e in logs if e["event"] == "drain_in_progress"]) < 2:
            await asyncio.sleep(0.01)
        task.cancel()
    reports = [e for e in logs if e["event"] == "drain_in_progress"]
    assert [(e["in_flight"], e["seats_held"]) for e in reports[:2]] == [(2, 1), (2, 1)]
    assert reports[0]["seconds"] <= reports[1]["seconds"]
