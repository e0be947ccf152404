"""A provider that fails, and a tool call the model got wrong, on a running node with the real
``openai-compatible`` client against a scripted loopback server.

- garbage (a 200 that is not JSON, or JSON without ``choices``), a timeout and a 500: the turn
  fails ``llm_unavailable`` naming the CO-12 class, the delivery is NAKed and redelivered, and the
  redelivered turn answers the message: nothing is lost;
- a 429: the key is benched (CO-42) and the same call goes on with the entry's next key, so the
  turn answers at once;
- a 400 (fatal): the turn fails ``llm_fatal``, the delivery is acked (a retry would meet the same
  refusal) and the message reads ``failed``;
- bad tool arguments (schema violations, unparsable JSON, an unknown tool): tool errors the model
  reads in its next round, after which it does the job right.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.llm_servers import Reply, openai_tools
from tests.support.procs import Node, free_port

from .llm import OpenAIRouted
from .support import Broker, company_with_provider, fault_node_file, post_message, turns_of, wait_for
from .wire import OPENAI

# case → (the failing reply, the CO-12 class the turn's error names)
FAILURES: dict[str, tuple[Reply, str]] = {
    "garbage": (Reply(b"<html>upstream hiccup</html>"), "server"),
    "shapeless": (Reply({"object": "chat.completion", "note": "no choices"}), "server"),
    "timeout": (Reply({"never": "read"}, delay=4.0), "timeout"),
    "server-error": (Reply({"error": {"message": "boom"}}, status=500), "server"),
}
RATE_LIMITED = Reply({"error": {"message": "slow down"}}, status=429, headers={"Retry-After": "1"})
_CASE = re.compile(r"case:([a-z-]+)")


def _boot(start_node: Callable[..., Node], tmp_path: Path, llm: OpenAIRouted) -> tuple[Node, Broker]:
    entry = OPENAI.entry(llm, timeout_seconds=1.0, api_keys=["test-key", "test-key-2"])
    company = company_with_provider(tmp_path / "company.yaml", entry)
    port = free_port()
    node = start_node(
        "node",
        "--node",
        str(fault_node_file(tmp_path / "n", node_id="prov-1", port=port)),
        "--company",
        str(company),
        port=port,
    )
    node.wait_ready()
    return node, Broker(tmp_path / "n" / "store")


def test_failing_provider_fails_the_turn_and_loses_nothing(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    attempts: dict[str, int] = {}
    lock = threading.Lock()

    def respond(seat: str, body: Any) -> Reply:
        match = _CASE.search(OPENAI.user_text(body))
        case = match.group(1) if match else "?"
        with lock:
            attempts[case] = attempts.get(case, 0) + 1
            n = attempts[case]
        if case == "fatal":
            return Reply({"error": {"type": "invalid_request_error", "message": "bad request"}}, status=400)
        if n == 1 and case in FAILURES:
            return FAILURES[case][0]
        if n == 1 and case == "rate-limited":
            return RATE_LIMITED
        return openai_tools(("submit_work", {"outcome": "delivered", "summary": f"handled {case}"}))

    with OpenAIRouted(respond=respond) as llm:
        node, broker = _boot(start_node, tmp_path, llm)
        sent: dict[str, dict[str, Any]] = {}
        for case in [*FAILURES, "rate-limited", "fatal"]:
            r = post_message(node, "triage", f"Please look at this. case:{case}")
            assert r.status_code == 202, r.text
            sent[case] = r.json()

        def settled() -> dict[str, dict[str, Any]] | None:
            out = {c: node.get(f"/messages/{m['message_id']}").json() for c, m in sent.items()}
            return out if all(m["status"] in ("answered", "failed") for m in out.values()) else None

        messages = wait_for("every message settled", settled, timeout=40, node=node)
        rows = turns_of(node, seat="triage")
        for case, (_, kind) in FAILURES.items():
            mine = sorted(
                (t for t in rows if t["trigger_id"] == sent[case]["event_id"]), key=lambda t: t["started_at"]
            )
            assert [t["outcome"] for t in mine] == ["failed", "delivered"], (case, mine)
            failed, done = mine
            assert failed["error_kind"] == "llm_unavailable", case
            assert f": {kind}: " in failed["error"], (case, failed["error"])
            assert failed["work_key"] == done["work_key"]  # the same trigger, redelivered (CO-19)
            assert messages[case]["status"] == "answered", case
            assert messages[case]["reply"] == f"handled {case}"
            assert messages[case]["turn_id"] == done["turn_id"]
        # the 429 benched the first key and the same call went on with the second (CO-42)
        (limited,) = [t for t in rows if t["trigger_id"] == sent["rate-limited"]["event_id"]]
        assert limited["outcome"] == "delivered", limited
        assert messages["rate-limited"]["status"] == "answered"
        keys = [
            r.headers.get("authorization")
            for r in llm.requests()  # executor calls; the reviewer's follow on the free key
            # the trigger's own case (the first one named): recalled episodes of earlier turns in
            # a prompt's memory sections may name other cases (AG-8)
            if (m := _CASE.search(OPENAI.user_text(r.body))) and m.group(1) == "rate-limited"
        ]
        assert keys == ["Bearer test-key", "Bearer test-key-2"], keys
        (benched,) = [e for e in node.events() if e.get("event") == "credential_cooled"]
        assert benched["provider"] == "default" and benched["kind"] == "rate_limit"
        (fatal,) = [t for t in rows if t["trigger_id"] == sent["fatal"]["event_id"]]
        assert fatal["outcome"] == "failed" and fatal["error_kind"] == "llm_fatal"
        assert "HTTP 400" in fatal["error"]
        assert messages["fatal"]["status"] == "failed" and messages["fatal"]["turn_id"] == fatal["turn_id"]
        assert attempts == {**{c: 2 for c in FAILURES}, "rate-limited": 2, "fatal": 1}

        # every delivery settled: nothing is left unacked or waiting out a NAK delay
        def drained() -> dict[str, int] | None:
            state = broker.inbox("triage")
            return state if state["ack_pending"] == 0 else None

        state = wait_for("the inbox drained", drained)
        assert state["pending"] == 0
        assert state["delivered"] == 2 * len(FAILURES) + 2
        failures = node.get("/metrics").text
        assert (
            f'crewlet_turn_failures_total{{error_kind="llm_unavailable",seat="triage"}} {len(FAILURES)}.0'
            in failures
        )
        assert 'crewlet_turn_failures_total{error_kind="llm_fatal",seat="triage"} 1.0' in failures


def test_bad_tool_arguments_come_back_as_tool_errors(start_node: Callable[..., Node], tmp_path: Path) -> None:
    script = {
        "dev": [
            openai_tools(
                ("create_work_item", {"project": "SUP"}),  # no title
                (
                    "create_work_item",
                    {"project": "sup", "title": "x", "priority": "urgent"},
                ),  # pattern, extra
                ("update_work_item", '{"key": "SUP-1", "status": '),  # not JSON
                ("delete_everything", {}),  # no such tool
            ),
            openai_tools(("create_work_item", {"project": "ENG", "title": "Fix the README typo"})),
            openai_tools(("submit_work", {"outcome": "delivered", "summary": "Filed ENG-1"})),
        ]
    }
    with OpenAIRouted(script) as llm:
        node, _ = _boot(start_node, tmp_path, llm)
        r = post_message(node, "dev", "File the README typo in ENG.")
        assert r.status_code == 202, r.text
        message_id = r.json()["message_id"]
        answered = wait_for(
            "the message answered",
            lambda: (m := node.get(f"/messages/{message_id}").json())["status"] == "answered" and m,
            node=node,
        )
        assert answered["reply"] == "Filed ENG-1"
        second = llm.requests("dev")[1].body
        results = OPENAI.results(second)
        assert [x.call_id for x in results] == OPENAI.call_ids(second)
        assert all(x.is_error for x in results)
        codes = [x.content["code"] for x in results]
        assert codes == ["invalid_arguments", "invalid_arguments", "invalid_arguments", "unknown_tool"]
        assert "title" in results[0].content["error"]
        assert "sup" in results[1].content["error"] or "project" in results[1].content["error"]
        assert "not a JSON object" in results[2].content["error"]
        assert "create_work_item" in results[3].content["error"]  # names the tools there are
        (turn,) = turns_of(node, seat="dev")
        # three executor rounds, then the review's submit_review (CO-30)
        assert turn["outcome"] == "delivered" and turn["tool_calls"] == 7 and turn["rounds"] == 4
        record = node.get(f"/turns/{turn['turn_id']}").json()["record"]
        assert [c["is_error"] for c in record["tool_calls"]] == [True, True, True, True, False, False, False]
        assert record["tool_calls"][2]["raw_arguments"] == '{"key": "SUP-1", "status": '
        # the refused calls wrote nothing: one item, the one the model filed in round 2
        assert node.get("/work?project=SUP").json()["count"] == 0
        eng = node.get("/work?project=ENG").json()["items"]
        assert [(i["key"], i["title"], i["reporter"]) for i in eng] == [
            ("ENG-1", "Fix the README typo", "seat:dev")
        ]
