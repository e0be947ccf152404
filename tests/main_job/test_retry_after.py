"""Providers that back off as asked, on a running node (issue 14, CO-7, CO-12, CO-42).

One node, two provider entries on two scripted loopback servers:

- ``default`` (the Anthropic wire) serves ``triage``: six messages arrive during a 529
  ``overloaded_error`` storm. The first 529 says ``retry-after: 3``, the next two say nothing. The
  seat makes one call per backoff step, never six in a burst: the server's 3 s, then the jittered
  doubling steps (2 s, 4 s), then the six answers, one call each. The messages whose attempt
  failed (a NAKed message may come back before the next queued one, so one message can fail
  twice) end ``answered`` with the earlier error cleared.
- ``local`` (the OpenAI wire, one key) serves ``dev``: a 429 with ``Retry-After: 2``. The next call
  comes at least 2 s later — in fact not before the key's bench ends: the 429 benches the key for
  FL-121's 60 s minimum (CO-42), so the message reads ``queued`` with ``retry_in_seconds`` ≥ 59 and
  no second call reaches the server while the storm (≥ 9 s) plays out. The test does not wait the
  minute out: the redelivery after a hold is the storm's own path.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tests.support.llm_servers import Reply
from tests.support.procs import REPO, Node, free_port, node_file, write_yaml

from .llm import AnthropicRouted, OpenAIRouted, Seen
from .support import post_message, turns_of, wait_for
from .wire import ANTHROPIC, OPENAI, Wire

OVERLOADED = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
STORM = 3
"""How many executor calls of ``triage`` the storm answers 529."""


def is_review(wire: Wire, body: Any) -> bool:
    """A reviewer's request (CO-30): its only tool is ``submit_review``."""
    return isinstance(body, dict) and wire.tool_names(body) == ["submit_review"]


def executor_calls(server: Any, wire: Wire, seat: str) -> list[Seen]:
    """The seat's executor requests (review requests left out), in arrival order."""
    return [s for s in server.requests(seat) if not is_review(wire, s.body)]


def two_entry_company(path: Path, anthropic: AnthropicRouted, openai: OpenAIRouted) -> Path:
    """The example company with ``default`` on the Anthropic server and ``local`` (``dev``'s) on
    the OpenAI one."""
    data = yaml.safe_load((REPO / "examples" / "company.yaml").read_text())
    data["providers"]["llm"]["default"] = ANTHROPIC.entry(anthropic, timeout_seconds=5.0)
    data["providers"]["llm"]["local"] = OPENAI.entry(openai, timeout_seconds=5.0)
    for unit in data["units"]:
        for role in unit["roles"]:
            if role["handle"] == "dev":
                role["llm"] = "local"
    return write_yaml(path, data)


def test_the_seat_backs_off_as_the_provider_asks(start_node: Callable[..., Node], tmp_path: Path) -> None:
    lock = threading.Lock()
    storm = {"left": STORM}

    def claude(seat: str, body: Any) -> Reply:
        if is_review(ANTHROPIC, body):
            return ANTHROPIC.tools(("submit_review", {"decision": "done", "notes": "fine"}))
        with lock:
            n = storm["left"]
            storm["left"] -= 1
        if n > 0:
            headers = {"retry-after": "3"} if n == STORM else {}
            return Reply(OVERLOADED, status=529, headers=headers)
        text = ANTHROPIC.user_text(body)
        return ANTHROPIC.tools(
            ("submit_work", {"outcome": "delivered", "summary": f"answered: {text[-12:]}"})
        )

    limited = {"done": False}

    def local(seat: str, body: Any) -> Reply:
        if is_review(OPENAI, body):
            return OPENAI.tools(("submit_review", {"decision": "done", "notes": "fine"}))
        with lock:
            first, limited["done"] = not limited["done"], True
        if first:
            return Reply({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "2"})
        return OPENAI.tools(("submit_work", {"outcome": "delivered", "summary": "done after the wait"}))

    with AnthropicRouted(respond=claude) as anthropic, OpenAIRouted(respond=local) as openai:
        company = two_entry_company(tmp_path / "company.yaml", anthropic, openai)
        port = free_port()
        node = start_node(
            "node",
            "--node",
            str(
                node_file(
                    tmp_path / "n",
                    node_id="retry-1",
                    port=port,
                    coordination={"lease_ttl_seconds": 3.0},
                    stream={"ack_wait_seconds": 5.0},
                )
            ),
            "--company",
            str(company),
            port=port,
        )
        node.wait_ready()

        r = post_message(node, "dev", "Please check the release notes.")
        assert r.status_code == 202, r.text
        dev_message = r.json()["message_id"]
        sent = []
        for n in range(6):
            r = post_message(node, "triage", f"Report number {n} please")
            assert r.status_code == 202, r.text
            sent.append(r.json())

        # the 429: the message is queued again, its attempt's class on it, and waits as asked
        queued = wait_for(
            "dev's message back in the queue",
            lambda: (
                (m := node.get(f"/messages/{dev_message}").json())["status"] == "queued"
                and m["error_kind"]
                and m
            ),
            node=node,
        )
        assert queued["error_kind"] == "llm_unavailable" and queued["outcome"] == "failed"
        assert "rate_limit" in queued["error"]
        assert queued["retry_in_seconds"] >= 2

        # the storm: every message answered, one call per backoff step
        def all_answered() -> list[dict[str, Any]] | None:
            out = [node.get(f"/messages/{m['message_id']}").json() for m in sent]
            return out if all(m["status"] == "answered" for m in out) else None

        answered = wait_for("the six triage messages answered", all_answered, timeout=60, node=node)
        calls = executor_calls(anthropic, ANTHROPIC, "triage")
        assert len(calls) == STORM + 6, [c.at for c in calls]
        gaps = [b.at - a.at for a, b in zip(calls, calls[1:], strict=False)]
        # the server's retry-after: 3, then the seat's own steps: 2 s and 4 s (jitter only stretches)
        assert gaps[0] >= 3.0, gaps
        assert gaps[1] >= 2.0, gaps
        assert gaps[2] >= 4.0, gaps
        rows = turns_of(node, seat="triage")
        failed = [t for t in rows if t["outcome"] == "failed"]
        assert len(failed) == STORM and {t["error_kind"] for t in failed} == {"llm_unavailable"}
        assert any(": server: " in t["error"] and "overloaded_error" in t["error"] for t in failed)
        retried = {t["trigger_id"] for t in failed}
        for message in answered:
            assert message["reply"].startswith("answered: "), message
            assert message["error"] is None and message["error_kind"] is None, message
            assert message["outcome"] == "delivered"
        # which message a failed call carried depends on what the seat fetched after each hold
        # (a NAKed message can come back before or after the next queued one): any of the six
        assert retried and retried <= {m["event_id"] for m in sent}, retried

        # the 429's next call: at least the 2 s the server asked; the key's 60 s bench (FL-121)
        # outlasts it, so the message waits out the bench in one delivery and no call came meanwhile
        assert queued["retry_in_seconds"] >= 59.0, queued
        calls_to_dev = executor_calls(openai, OPENAI, "dev")
        assert len(calls_to_dev) == 1 and calls[-1].at - calls_to_dev[0].at >= 2.0, calls_to_dev
        assert node.get(f"/messages/{dev_message}").json()["status"] == "queued"
        held = [e for e in node.events() if e.get("event") == "seat_turn_held"]
        assert [h["seat"] for h in held].count("triage") == STORM
        asked = [h["asked"] for h in held if h["seat"] == "triage"]
        assert 2.5 < asked[0] <= 3.0 and asked[1:] == [None, None], asked  # what is left of the 3 s
