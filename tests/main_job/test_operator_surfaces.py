"""What an operator hits first: unknown routes and methods answer JSON 404/405 (never a 500), a
body no seat can work on is refused or ignored by name, an operator's assignment wakes the seat
(CO-10), and a second process on a node's store or port is refused by name (exit 2)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from tests.main_job.support import SECRET, post_github, post_message, turns_of, wait_for
from tests.support.procs import SHARED, TOKEN, Node

SHARED_HOOKS = SHARED / "data" / "github-webhooks"


def _node(start_node: Callable[..., Node], tmp_path: Path) -> Node:
    node = start_node("run", "--data-dir", str(tmp_path / "d"), env={"GITHUB_WEBHOOK_SECRET": SECRET})
    node.wait_ready()
    return node


def test_unknown_routes_methods_and_bodies_answer_json(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    node = _node(start_node, tmp_path)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = httpx.get(node.url + "/nonexistent", headers=auth)
    assert r.status_code == 404 and r.json()["error"] == "not_found", r.text
    r = httpx.delete(node.url + "/work/SUP-1", headers=auth)
    assert r.status_code == 405 and r.json()["error"] == "method_not_allowed", r.text
    deep = ("[" * 100_000 + "]" * 100_000).encode()
    r = httpx.post(
        node.url + "/seats/lead/messages", content=deep, headers={**auth, "Content-Type": "application/json"}
    )
    assert r.status_code == 400 and r.json()["error"] == "invalid_request", r.text
    r = httpx.post(
        node.url + "/seats/lead/messages",
        content=b'{"text": "\xff\xfe"}',
        headers={**auth, "Content-Type": "application/json"},
    )
    assert r.status_code == 400, r.text
    r = post_message(node, "lead", "about a missing item", work_item="ZZZ-99")
    assert r.status_code == 404 and r.json()["error"] == "unknown_work_item", r.text
    # a key of the right shape no item can have (past 64-bit numbers) is the caller's input: 400 naming it
    r = post_message(node, "lead", "about an impossible item", work_item="ENG-99999999999999999999")
    assert r.status_code == 400 and r.json()["detail"]["field"] == "work_item", r.text
    # GitHub's ping has no issue title: acknowledged, nothing published, no turn
    r = post_github(node, body=(SHARED_HOOKS / "ping.event.json").read_bytes(), event="ping")
    assert r.status_code == 200 and r.json()["status"] == "ignored", r.text
    r = post_github(node, body=b'{"issue": {"title": "\\ud800 lone surrogate"}}')
    assert r.status_code == 400 and r.json()["error"] == "invalid_json", r.text
    assert turns_of(node) == []
    assert node.get("/work?project=SUP").json()["count"] == 0


def test_an_operator_assignment_wakes_the_seat(start_node: Callable[..., Node], tmp_path: Path) -> None:
    node = _node(start_node, tmp_path)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    r = httpx.post(node.url + "/work", json={"project": "ENG", "title": "Fix the flag parser"}, headers=auth)
    assert r.status_code == 201, r.text
    key = r.json()["item"]["key"]
    r = httpx.patch(node.url + f"/work/{key}", json={"assignee": "lead"}, headers=auth)
    assert r.status_code == 200, r.text
    (turn,) = wait_for(
        "the lead's turn",
        lambda: [t for t in turns_of(node, seat="lead") if t["outcome"] != "running"] or None,
    )
    assert turn["trigger_source"] == "work" and turn["work_item"] == key
    item = node.get(f"/work/{key}").json()
    assert item["status"] == "in_progress"
    # parents cannot form a cycle
    r = httpx.post(
        node.url + "/work", json={"project": "ENG", "title": "A sub-task", "parent": key}, headers=auth
    )
    assert r.status_code == 201, r.text
    child = r.json()["item"]["key"]
    r = httpx.patch(node.url + f"/work/{key}", json={"parent": child}, headers=auth)
    assert r.status_code == 400 and r.json()["detail"]["field"] == "parent", r.text
    assert "cycle" in r.json()["detail"]["message"]


def test_a_second_process_on_the_same_store_or_port_is_refused(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    first = _node(start_node, tmp_path)
    second = start_node("run", "--data-dir", str(tmp_path / "d"), name="second")
    assert second.wait(30) == 2
    failed = [e for e in second.events() if e.get("event") == "node_boot_failed"]
    assert failed and "is in use by pid" in failed[0]["error"] and "store.dir" in failed[0]["error"]
    third = start_node("run", "--data-dir", str(tmp_path / "other"), name="third", port=first.port)
    assert third.wait(30) == 2
    failed = [e for e in third.events() if e.get("event") == "node_boot_failed"]
    assert (
        failed and f"api.port {first.port}" in failed[0]["error"] and "already in use" in failed[0]["error"]
    )
    assert "Traceback" not in third.output()
    assert first.get("/ready", token=None).status_code == 200  # the running node is untouched
