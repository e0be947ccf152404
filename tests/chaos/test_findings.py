"""The chaos run's findings, each kept as a small test on a real node (issue 17).

Run by ``make chaos-check`` with the runner's own tests (not ``make test``: its 15 minutes are spent).

- A replayed GitHub delivery whose dedupe claim failed open (FL-33) — the ``claims`` bucket's
  leader lost for 10 s — mirrored its comment twice: the comment now carries an operation id
  derived from the delivery id, and a trigger the inbox stream collapsed is marked ``duplicate``.
- (From the tryout) a message whose node was killed mid-turn read ``running`` under the dead turn
  until its redelivery: the restart sets it back to ``queued``.
"""

from __future__ import annotations

import signal
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tests.main_job.llm import OpenAIRouted
from tests.main_job.support import SECRET, Broker, post_github, turns_of, wait_for
from tests.main_job.test_github import item, load, post, settled
from tests.main_job.test_mid_turn import ENV, _files, _submit
from tests.support.llm_servers import Reply
from tests.support.procs import TOKEN, Node


@pytest.fixture
def node(start_node: Callable[..., Node], tmp_path: Path) -> Node:
    started = start_node("run", "--data-dir", str(tmp_path / "data"), env={"GITHUB_WEBHOOK_SECRET": SECRET})
    started.wait_ready(60)
    return started


def test_a_delivery_processed_again_after_its_claim_failed_open_changes_nothing_twice(
    node: Node, tmp_path: Path
) -> None:
    """FL-33/FL-122: when the ``claims`` bucket cannot be asked a delivery is processed again (the
    chaos run, issue 17: the bucket's leader lost for 10 s, a replayed comment delivery mirrored its
    comment twice). An empty ``claims`` bucket is what such a node sees. The comment lands once (its
    operation id derives from the delivery id), a repeated ``opened`` wakes nobody, the generic
    route's repeated trigger is collapsed by the inbox stream and answered ``duplicate``, and no
    seat runs a second turn."""
    broker = Broker(tmp_path / "data" / "node-0")
    opened, comment, generic = str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4())
    first = post(node, "issues", load("issues.opened"), delivery=opened)
    assert first.status_code == 202, first.text
    key = first.json()["linked"]["work_item"]
    said = post(node, "issue_comment", load("issue_comment.created"), delivery=comment)
    assert said.status_code == 202 and said.json()["woken"] == ["lead"], said.text
    via_generic = post_github(node, delivery=generic)
    assert via_generic.status_code == 202, via_generic.text
    before = settled(node)
    assert broker.kv_purge("claims") == 3
    published = broker.last_seq()

    again = post(node, "issues", load("issues.opened"), delivery=opened)
    assert (again.status_code, again.json()["status"]) == (200, "ignored"), again.text
    said_again = post(node, "issue_comment", load("issue_comment.created"), delivery=comment)
    assert said_again.status_code == 202, said_again.text
    generic_again = post_github(node, delivery=generic)
    assert (generic_again.status_code, generic_again.json()["status"]) == (200, "duplicate"), (
        generic_again.text
    )

    bodies = [c["body"] for c in item(node, key)["comments"] if c["author"].startswith("github:")]
    assert len([b for b in bodies if "You are totally right!" in b]) == 1, bodies
    after = settled(node, 3.0)
    assert Counter(t["seat"] for t in after) == Counter(t["seat"] for t in before), after
    assert broker.last_seq() == published  # every repeated trigger was collapsed by the stream
    # a third post finds the claim the second one took: the usual 200 duplicate
    third = post(node, "issue_comment", load("issue_comment.created"), delivery=comment)
    assert (third.status_code, third.json()["status"]) == (200, "duplicate"), third.text


def test_a_message_killed_mid_turn_reads_queued_then_answered(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    """``GET /messages/{id}`` after a ``kill -9`` mid-turn: the restarted node marks the dead turn
    ``abandoned`` and the message ``queued`` (naming the turn) while its delivery waits to come
    back — it said ``running`` under the dead turn until then (issue 17's tryout) — and
    ``answered`` once the redelivered turn ran."""
    with OpenAIRouted({"triage": [Reply({"never": "sent"}, delay=60.0)]}) as llm:
        argv, port = _files(tmp_path, llm)
        first = start_node(*argv, name="first", port=port, env=ENV)
        first.wait_ready()
        r = httpx.post(
            first.url + "/seats/triage/messages",
            json={"text": "What is open on SUP?"},
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=10,
        )
        assert r.status_code == 202, r.text
        message_id = r.json()["message_id"]
        llm.wait_requests("triage", 1)
        (running,) = wait_for("the running turn", lambda: turns_of(first, seat="triage"), node=first)
        status = first.get(f"/messages/{message_id}").json()
        assert (status["status"], status["turn_id"]) == ("running", running["turn_id"]), status

        first.signal(signal.SIGKILL)
        assert first.wait(10) == -signal.SIGKILL
        llm.add("triage", _submit("Nothing is open on SUP."))
        second = start_node(*argv, name="second", port=port, env=ENV)
        seen = []  # from the first answer on, before the seats role starts too (the tryout saw a gap)
        while len(seen) < 40 and second.popen.poll() is None:
            try:
                r = second.get(f"/messages/{message_id}", timeout=2)
            except httpx.HTTPError:
                continue
            if r.status_code == 200:
                seen.append((r.json()["status"], r.json()["turn_id"], r.json().get("error") or ""))
        assert seen and all(s != "running" or t != running["turn_id"] for s, t, _ in seen), seen
        assert all(running["turn_id"] in e for s, _, e in seen if s == "queued"), seen
        answered = wait_for(
            "the message answered",
            lambda: (s := second.get(f"/messages/{message_id}").json())["status"] == "answered" and s,
            timeout=30,
            node=second,
        )
        assert answered["turn_id"] != running["turn_id"] and answered["error"] is None, answered
