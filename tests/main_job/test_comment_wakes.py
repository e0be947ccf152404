"""CO-41 on a running node: an operator's comment on an item assigned to ``lead`` that mentions
``@dev`` gives ``lead`` one turn woken ``commented`` and ``dev`` one woken ``mentioned`` (not the
human ``@founder``, not a mention inside a code span); the seventh comment within the hour wakes
nobody, logged ``comment_wake_limited``, and still lands.

The offline script here answers every wake without a tool call, so the only writes are the
operator's and the counts do not depend on what the seats say back."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.support.procs import TOKEN, Node, free_port, write_yaml

from .support import company_with_provider, fault_node_file, turns_of, wait_for

SCRIPT = {
    "rules": [
        {"when": {"source": "work", "reason": "assigned"}, "final": "Took {trigger.work_item.key}."},
        {
            "when": {"source": "work", "reason": "commented"},
            "final": "Read the comment on {trigger.work_item.key}.",
        },
        {
            "when": {"source": "work", "reason": "mentioned"},
            "final": "Read the mention on {trigger.work_item.key}.",
        },
    ],
    "default": {"final": "Nothing to do."},
}


def _post(node: Node, path: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{node.url}{path}", json=body, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
    )


def _triggers(node: Node, seat: str) -> list[dict[str, Any]]:
    """The triggers of ``seat``'s finished turns, oldest first.

    A ``fenced`` turn is left out: it stopped before its next call and its delivery was returned and
    run again (FL-74; a test node's 3 s TTL on a busy machine trips it now and then): the rerun is
    the wake."""
    rows = [t for t in turns_of(node, seat=seat) if t["outcome"] not in ("running", "fenced")]
    records = [node.get(f"/turns/{t['turn_id']}").json()["record"] for t in reversed(rows)]
    return [r["trigger"] for r in records]


def _woken(node: Node, seat: str, reason: str) -> int:
    """How many wakes with ``reason`` ``seat``'s finished turns stood for (a merged turn counts each)."""
    return sum(len(t["constituent_ids"]) or 1 for t in _triggers(node, seat) if t["reason"] == reason)


def test_comment_and_mention_wakes_and_their_bound(start_node: Callable[..., Node], tmp_path: Path) -> None:
    script = write_yaml(tmp_path / "script.yaml", SCRIPT)
    company = company_with_provider(
        tmp_path / "company.yaml", {"type": "offline", "model": "crewlet-offline-1", "script": str(script)}
    )
    port = free_port()
    node = start_node(
        "node", "--node", str(fault_node_file(tmp_path / "n", node_id="wakes-1", port=port)), "--company",
        str(company), port=port,
    )  # fmt: skip
    node.wait_ready()

    r = _post(node, "/work", {"project": "ENG", "title": "Flaky lantern test", "assignee": "lead"})
    assert r.status_code == 201, r.text
    key = r.json()["item"]["key"]
    wait_for("lead's assignment turn", lambda: _woken(node, "lead", "assigned") == 1, node=node)

    # one comment: the assignee is woken `commented`, the mentioned agent `mentioned`; the human
    # founder, the mention in a code span and the operator (no seat) are not
    body = "Can you pair on this, @dev? (cc @founder; `@docs` is only an example)"
    r = _post(node, f"/work/{key}/comments", {"body": body})
    assert r.status_code == 201, r.text
    comment_id = r.json()["comment"]["id"]
    wait_for(
        "lead's and dev's comment turns",
        lambda: _woken(node, "lead", "commented") == 1 and _woken(node, "dev", "mentioned") == 1,
        node=node,
    )
    lead = [t for t in _triggers(node, "lead") if t["reason"] == "commented"]
    dev = _triggers(node, "dev")
    assert len(lead) == 1 and len(dev) == 1
    for trigger, reason in ((lead[0], "commented"), (dev[0], "mentioned")):
        assert (trigger["source"], trigger["reason"], trigger["work_item"]["key"]) == ("work", reason, key)
        assert trigger["sender"] == "operator:test" and trigger["text"] == body
        assert trigger["payload"]["comment"]["id"] == comment_id
        assert trigger["delegation_depth"] == 0 and trigger["parent_turn_id"] is None
    assert _triggers(node, "docs") == [] and _triggers(node, "triage") == []

    # comments 2..6 wake both again; the 7th within the hour wakes nobody and still lands
    for n in range(2, 8):
        r = _post(node, f"/work/{key}/comments", {"body": f"Update {n} for @dev"})
        assert r.status_code == 201, r.text
    wait_for(
        "six comment wakes each",
        lambda: _woken(node, "lead", "commented") == 6 and _woken(node, "dev", "mentioned") == 6,
        node=node,
    )
    limited = [e for e in node.events() if e.get("event") == "comment_wake_limited"]
    assert sorted((e["seat"], e["work_item"]) for e in limited) == [("dev", key), ("lead", key)]
    published = [e for e in node.events() if e.get("event") == "comment_wake_published"]
    assert (
        sorted((e["seat"], e["reason"]) for e in published)
        == [("dev", "mentioned")] * 6 + [("lead", "commented")] * 6
    )
    item = node.get(f"/work/{key}").json()
    assert len(item["comments"]) == 7
    assert _woken(node, "lead", "commented") == 6 and _woken(node, "dev", "mentioned") == 6
