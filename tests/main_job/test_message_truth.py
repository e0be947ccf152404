"""What ``GET /messages/{id}`` says is what happened (CO-8, issue 14).

On a running node with the real ``openai-compatible`` client against a scripted loopback server,
every status is reached through a real turn, one seat per case so no case waits on another's
backoff (a redelivery holds its seat):

- ``triage``: ``running`` while a slow call is out, then ``answered`` with the reply; a message
  naming a ``work_item`` gets that reply as exactly one comment there, authored by the seat;
- ``dev``: a 500 with ``Retry-After: 3``, so the message is ``queued`` again with the attempt's class, then ``answered``
  with that error cleared;
- ``lead``: a 400 (fatal) ends ``failed`` (``llm_fatal``); the same invalid tool call every round
  ends the turn ``incomplete``, so the message reads ``failed`` with that outcome, never
  ``answered`` with an empty reply;
- ``docs``: a 500 on every attempt. After the last allowed delivery (``stream.max_deliver: 3``) the
  message reads ``dead_lettered`` and keeps the last attempt's error.

The status rules themselves (:func:`services.seats.messages.message_status`) are pinned below
without a node.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from services.seats.dispatcher import redelivery_delay
from services.seats.messages import fit_comment, message_status, owes_reply, reply_of
from shared import estate
from shared.turns import Trigger
from tests.support.llm_servers import Reply
from tests.support.procs import TOKEN, Node, free_port, node_file

from .llm import OpenAIRouted
from .support import company_with_provider, post_message, turns_of, wait_for
from .wire import OPENAI

_CASE = re.compile(r"case:([a-z-]+)")
MAX_DELIVER = 3


def _status(node: Node, message_id: str) -> dict[str, Any]:
    r = node.get(f"/messages/{message_id}")
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def _until(node: Node, message_id: str, status: str, timeout: float = 30.0) -> dict[str, Any]:
    return wait_for(
        f"message {message_id} {status}",
        lambda: (m := _status(node, message_id))["status"] == status and m,
        timeout=timeout,
        node=node,
    )


def test_every_status_through_a_real_turn(start_node: Callable[..., Node], tmp_path: Path) -> None:
    attempts: dict[str, int] = {}
    lock = threading.Lock()

    def respond(seat: str, body: Any) -> Reply:
        if OPENAI.tool_names(body) == ["submit_review"]:  # the reviewer (CO-30) agrees
            return OPENAI.tools(("submit_review", {"decision": "done", "notes": "fine"}))
        match = _CASE.search(OPENAI.user_text(body))
        case = match.group(1) if match else "?"
        with lock:
            attempts[case] = attempts.get(case, 0) + 1
            n = attempts[case]
        done = OPENAI.tools(("submit_work", {"outcome": "delivered", "summary": f"answered {case}"}))
        if case == "slow" and n == 1:
            return Reply(done.body, delay=4.0)
        if case == "flaky" and n == 1:
            return Reply({"error": {"message": "upstream hiccup"}}, status=500, headers={"Retry-After": "3"})
        if case == "dead":
            return Reply({"error": {"message": "down for good"}}, status=500)
        if case == "fatal":
            return Reply({"error": {"type": "invalid_request_error", "message": "bad request"}}, status=400)
        if case == "stuck":  # the same invalid call every round: no title
            return OPENAI.tools(("create_work_item", {"project": "SUP"}))
        return done

    with OpenAIRouted(respond=respond) as llm:
        company = company_with_provider(
            tmp_path / "company.yaml",
            OPENAI.entry(llm, timeout_seconds=5.0),
            turn_engine={"max_tool_rounds": 3},
        )
        port = free_port()
        node = start_node(
            "node",
            "--node",
            str(
                node_file(
                    tmp_path / "n",
                    node_id="truth-1",
                    port=port,
                    coordination={"lease_ttl_seconds": 3.0},
                    stream={"ack_wait_seconds": 5.0, "max_deliver": MAX_DELIVER},
                )
            ),
            "--company",
            str(company),
            port=port,
        )
        node.wait_ready()
        r = httpx.post(
            f"{node.url}/work",
            json={"project": "SUP", "title": "Lantern crashes on start"},
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=30,
        )
        assert r.status_code == 201, r.text
        item = r.json()["item"]["key"]

        def send(seat: str, case: str, **fields: Any) -> str:
            r = post_message(node, seat, f"Please handle this. case:{case}", **fields)
            assert r.status_code == 202, r.text
            return str(r.json()["message_id"])

        dead = send("docs", "dead")
        assert _status(node, dead)["status"] in ("queued", "running")
        slow = send("triage", "slow")
        flaky = send("dev", "flaky")
        fatal = send("lead", "fatal")
        stuck = send("lead", "stuck")
        commented = send("triage", "comment", work_item=item)

        queued = wait_for(
            "the flaky message back in the queue",
            lambda: (m := _status(node, flaky))["status"] == "queued" and m["error_kind"] and m,
            node=node,
        )
        assert queued["error_kind"] == "llm_unavailable" and "server" in queued["error"]
        assert queued["retry_in_seconds"] >= 2.5  # the server's Retry-After: 3, less the time since

        running = _until(node, slow, "running")
        assert running["turn_id"] and running["reply"] is None
        cleared = _until(node, flaky, "answered")
        assert cleared["reply"] == "answered flaky"
        assert cleared["error"] is None and cleared["error_kind"] is None
        assert cleared["outcome"] == "delivered"
        answered = _until(node, slow, "answered")
        assert answered["reply"] == "answered slow" and answered["turn_id"] == running["turn_id"]
        assert node.get(f"/turns/{answered['turn_id']}").status_code == 200

        refused = _until(node, fatal, "failed")
        assert refused["error_kind"] == "llm_fatal" and "HTTP 400" in refused["error"]
        assert refused["outcome"] == "failed" and refused["reply"] is None

        incomplete = _until(node, stuck, "failed")
        assert incomplete["outcome"] == "incomplete" and incomplete["reply"] is None
        assert incomplete["error_kind"] and incomplete["error"]
        (turn,) = [t for t in turns_of(node, seat="lead") if t["turn_id"] == incomplete["turn_id"]]
        assert turn["outcome"] == "incomplete"

        letter = _until(node, dead, "dead_lettered", timeout=40)
        assert letter["error_kind"] == "llm_unavailable" and "server" in letter["error"]
        assert letter["num_delivered"] == MAX_DELIVER and letter["dead_lettered_at"]
        assert letter["retry_in_seconds"] is None  # no retry follows
        assert attempts["dead"] == MAX_DELIVER
        (lettered,) = [e for e in node.events() if e.get("event") == "inbox_dead_lettered"]
        assert lettered["seat"] == "docs" and lettered["num_delivered"] == MAX_DELIVER

        reply = _until(node, commented, "answered")["reply"]
        assert reply == "answered comment"
        comments = node.get(f"/work/{item}").json()["comments"]
        assert [(c["body"], c["author"]) for c in comments] == [(reply, "seat:triage")], comments


def _trigger(**payload: Any) -> Trigger:
    env = {"id": "e1", "type": payload.pop("type", "external_notification"), "payload": payload}
    return Trigger.from_envelope(env)


def _result(outcome: str, **fields: Any) -> Any:
    values = {
        "turn_id": "t1",
        "outcome": outcome,
        "failed": outcome in ("failed", "fenced"),
        "error": None,
        "error_kind": None,
        "delivered_any": False,
        **fields,
    }
    return SimpleNamespace(**values)


def test_message_status_never_reads_answered_for_nothing_delivered() -> None:
    owed = _trigger(source="api", reply_mode="engine", message_id="m1")
    task = _trigger(type="task_assigned", source="api", reply_mode="none", message_id="m2")
    legacy = _trigger(source="api", message_id="m3")  # published before the route set reply_mode
    assert owes_reply(owed) and owes_reply(legacy) and not owes_reply(task)

    silent = message_status(owed, _result("no_action"), "")
    assert silent["status"] == "failed" and silent["error_kind"] == "no_reply"
    assert silent["outcome"] == "no_action" and silent["reply"] is None
    assert message_status(task, _result("no_action"), "")["status"] == "answered"
    assert message_status(owed, _result("no_action", delivered_any=True), "")["status"] == "answered"
    incomplete = message_status(owed, _result("incomplete"), "half a thought")
    assert incomplete["status"] == "failed" and incomplete["error_kind"] == "incomplete"
    failed = message_status(owed, _result("failed", error="boom", error_kind="llm_fatal"), "")
    assert (failed["status"], failed["error_kind"], failed["error"]) == ("failed", "llm_fatal", "boom")
    answered = message_status(owed, _result("delivered"), "Here you go")
    assert answered == {
        "turn_id": "t1",
        "outcome": "delivered",
        "retry_in_seconds": None,
        "status": "answered",
        "reply": "Here you go",
        "error_kind": None,
        "error": None,
    }


def test_a_reply_too_long_for_a_comment_is_cut_to_fit_and_says_where_the_rest_is() -> None:
    # the tryout's 200 000-character reply: the comment failed whole and only a log line said so
    assert fit_comment("short", "m1") == "short"
    cut = fit_comment("é" * 100_000, "m1")
    assert len(cut.encode()) <= estate.COMMENT_LIMIT
    assert cut.startswith("é" * 1000) and cut.endswith("the whole reply: GET /messages/m1]")


def test_the_reply_masks_the_turns_secrets_as_its_record_does() -> None:
    # a resolved ${NAME} reaches the model; a model that repeats it must not publish it
    result = SimpleNamespace(reply="The token is s3cr3t-value, use it.", redact=("s3cr3t-value",))
    assert reply_of(result) == "The token is [redacted], use it."  # type: ignore[arg-type]


@pytest.mark.parametrize(("rng", "expected"), [(0.0, 4.0), (0.999, 4.0 * 1.24975)])
def test_redelivery_delay_jitters_only_upward(rng: float, expected: float) -> None:
    assert redelivery_delay(4.0, None, rng=lambda: rng) == pytest.approx(expected)
    assert redelivery_delay(4.0, 2.0, rng=lambda: rng) == 2.0  # the server's word wins
