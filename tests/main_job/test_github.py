"""Issue 10 on a running node: GitHub's real deliveries (and payloads written for the kinds the shared
set lacks) posted to ``POST /webhooks/github``, signed with a test secret (CO-35, CO-38, CO-41).

The node runs the example company on the offline provider: triage assigns a new GitHub issue's
work item to the lead, the lead answers comments. Payloads we write are the shared ones with the
fields GitHub would change (``action``, ``changes``, ``labels``, ``state``), so every other field
is GitHub's own.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
import yaml

from tests.support.procs import REPO, SHARED, TOKEN, Node

from .support import SECRET, sign, turns_of, wait_for

HOOKS = SHARED / "data" / "github-webhooks"
H = {"Authorization": f"Bearer {TOKEN}"}
BASIS = "github:186853002#1"


def load(name: str) -> dict[str, Any]:
    return dict(json.loads((HOOKS / f"{name}.json").read_bytes()))


def post(
    node: Node,
    event: str,
    payload: dict[str, Any] | bytes,
    *,
    delivery: str | None = None,
    form: bool = False,
    signature: str | None = None,
) -> httpx.Response:
    raw = payload if isinstance(payload, bytes) else json.dumps(payload, ensure_ascii=False).encode()
    ctype = "application/json"
    if form:
        raw = urlencode({"payload": raw.decode()}).encode()
        ctype = "application/x-www-form-urlencoded"
    headers = {
        "Content-Type": ctype,
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": signature or sign(raw),
    }
    return httpx.post(f"{node.url}/webhooks/github", content=raw, headers=headers, timeout=30)


def issue_event(action: str, **issue: Any) -> dict[str, Any]:
    """``issues.opened`` turned into another action on the same issue."""
    body = load("issues.opened")
    body["action"] = action
    body["issue"].update(issue)
    return body


def linked(node: Node, basis: str = BASIS) -> list[dict[str, Any]]:
    r = node.get("/work?" + urlencode({"external": basis}))
    assert r.status_code == 200, r.text
    return list(r.json()["items"])


def item(node: Node, key: str) -> dict[str, Any]:
    r = node.get(f"/work/{key}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def trigger_of(node: Node, turn_id: str) -> dict[str, Any]:
    r = node.get(f"/turns/{turn_id}")
    assert r.status_code == 200, r.text
    return dict(r.json()["record"]["trigger"])


def settled(node: Node, seconds: float = 2.0) -> list[dict[str, Any]]:
    """The turns once none has started or run for ``seconds``."""
    last: list[dict[str, Any]] = []
    quiet_since = time.monotonic()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = turns_of(node)
        if [(t["turn_id"], t["outcome"]) for t in rows] != [(t["turn_id"], t["outcome"]) for t in last]:
            last, quiet_since = rows, time.monotonic()
        elif time.monotonic() - quiet_since >= seconds and all(t["outcome"] != "running" for t in rows):
            return rows
        time.sleep(0.1)
    raise AssertionError(f"turns never settled: {last}")


@pytest.fixture
def node(start_node: Callable[..., Node], tmp_path: Path) -> Node:
    started = start_node("run", "--data-dir", str(tmp_path / "data"), env={"GITHUB_WEBHOOK_SECRET": SECRET})
    started.wait_ready(60)
    return started


def test_one_issue_one_work_item_through_its_whole_life(node: Node) -> None:
    """opened → edited → labeled → assigned → commented → closed → reopened: one work item whose
    fields follow the events, the comment on it; one triage turn (opened), the lead's turn from
    triage's assignment and one woken by the comment; no other model turn."""
    opened = load("issues.opened")
    r = post(node, "issues", opened)
    assert r.status_code == 202, r.text
    answer = r.json()
    key = answer["linked"]["work_item"]
    assert answer["linked"]["outcome"] == "created"
    assert [(x["seat"], x["reason"]) for x in answer["routed"]] == [("triage", "unmatched")]
    wait_for(
        "triage and lead turns",
        lambda: len([t for t in turns_of(node) if t["outcome"] != "running"]) >= 2,
        node=node,
    )
    edited = issue_event("edited", title="Spelling error in the README file (two t's)")
    edited["changes"] = {"title": {"from": opened["issue"]["title"]}}
    sequence = [
        ("issues", edited),
        ("issues", load("issues.labeled")),
        ("issues", load("issues.assigned")),
        ("issue_comment", load("issue_comment.created")),
        ("issues", issue_event("closed", state="closed")),
        ("issues", issue_event("reopened", state="open")),
    ]
    answers = []
    for event, payload in sequence:
        r = post(node, event, payload)
        assert r.status_code in (200, 202), r.text
        answers.append(r.json())
    assert all(not a.get("routed") for a in answers), answers  # nothing here routes a seat directly
    assert answers[3]["woken"] == ["lead"]  # the comment wakes the item's assignee (CO-41)
    rows = settled(node)
    items = linked(node)
    assert [i["key"] for i in items] == [key]
    got = item(node, key)
    assert got["title"] == "Spelling error in the README file (two t's)"
    assert got["labels"] == ["bug"]
    assert got["status"] == "reopened" and got["assignee"] == "lead"
    assert got["url"] == opened["issue"]["html_url"] and got["external"] == BASIS
    bodies = [c["body"] for c in got["comments"]]
    assert any("You are totally right!" in b and b.startswith("Codertocat on GitHub") for b in bodies), bodies
    seats = Counter(t["seat"] for t in rows)
    assert seats == {"triage": 1, "lead": 2}, rows
    reasons = sorted(trigger_of(node, t["turn_id"]).get("reason") or "" for t in rows if t["seat"] == "lead")
    assert reasons == ["assigned", "commented"], rows


def test_form_encoded_twin_lands_the_same_item(node: Node) -> None:
    """The form-encoded delivery is the JSON one: the same work item; a repeat of either is a no-op."""
    r = post(node, "issues", load("issues.opened"), form=True)
    assert r.status_code == 202, r.text
    key = r.json()["linked"]["work_item"]
    again = post(node, "issues", load("issues.opened"))  # the JSON twin, another delivery id
    assert again.status_code in (200, 202) and again.json()["linked"] == {
        "work_item": key,
        "outcome": "unchanged",
    }
    assert [i["key"] for i in linked(node)] == [key]
    assert item(node, key)["title"] == load("issues.opened")["issue"]["title"]


def test_bad_deliveries_are_refused_by_name(node: Node) -> None:
    raw = json.dumps(load("issues.opened")).encode()
    form_without = urlencode({"other": "x"}).encode()
    r = httpx.post(
        f"{node.url}/webhooks/github",
        content=form_without,
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "X-GitHub-Event": "issues",
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(form_without),
        },
        timeout=30,
    )
    assert r.status_code == 400 and r.json()["detail"].startswith("payload:"), r.text
    not_json = urlencode({"payload": "{not json"}).encode()
    r = post(node, "issues", not_json, signature=sign(not_json))
    assert r.status_code == 400 and r.json()["error"] == "invalid_json"  # sent as JSON content type
    r = httpx.post(
        f"{node.url}/webhooks/github",
        content=not_json,
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "X-GitHub-Event": "issues",
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(not_json),
        },
        timeout=30,
    )
    assert r.status_code == 400 and r.json()["detail"].startswith("payload:"), r.text
    # the HMAC is over the raw bytes: a body re-encoded after signing fails
    reencoded = json.dumps(json.loads(raw), indent=2).encode()
    r = post(node, "issues", reencoded, signature=sign(raw))
    assert r.status_code == 401
    r = post(node, "push", load("push.event"))
    assert r.status_code == 200 and r.json()["status"] == "ignored" and "push" in r.json()["reason"]
    r = post(node, "ping", load("ping.event"))
    assert r.status_code == 200 and r.json()["status"] == "pong"
    delivery = str(uuid.uuid4())
    assert post(node, "issues", load("issues.labeled"), delivery=delivery).status_code == 202
    r = post(node, "issues", load("issues.labeled"), delivery=delivery)
    assert r.status_code == 200 and r.json()["status"] == "duplicate"
    r = httpx.post(
        f"{node.url}/webhooks/github",
        content=raw,
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Delivery": "x",
            "X-Hub-Signature-256": sign(raw),
        },
        timeout=30,
    )
    assert r.status_code == 400 and r.json()["error"] == "missing_event"
    assert linked(node)[0]["labels"] == ["bug"]  # the labeled delivery that got through


def test_emoji_and_cjk_are_kept_byte_for_byte(node: Node) -> None:
    title = "Crash 💥 on start — 起動時にクラッシュ"
    body = "Steps: 1) 打开 2) 🎉\nExpected: nothing breaks ✅"
    opened = load("issues.opened")
    opened["issue"].update(number=77, title=title, body=body)
    r = post(node, "issues", opened)
    assert r.status_code == 202, r.text
    got = item(node, r.json()["linked"]["work_item"])
    assert got["title"] == title and got["body"] == body
    assert got["title"].encode() == title.encode()


def test_pull_request_review_routing(start_node: Callable[..., Node], tmp_path: Path) -> None:
    """A PR opened with a requested reviewer reaches exactly the mapped seat (dev is ``octocat``);
    ``synchronize`` and ``labeled`` mirror what they change and wake nobody."""
    data = yaml.safe_load((REPO / "examples" / "company.yaml").read_text())
    data["providers"]["llm"]["default"]["script"] = str((REPO / "examples" / "offline-script.yaml").resolve())
    eng = next(u for u in data["units"] if u["id"] == "eng")
    next(r for r in eng["roles"] if r["handle"] == "dev")["identities"] = {"github_login": "octocat"}
    company = tmp_path / "company.yaml"
    company.write_text(yaml.safe_dump(data))
    node = start_node(
        "run",
        "--data-dir",
        str(tmp_path / "data"),
        "--company",
        str(company),
        env={"GITHUB_WEBHOOK_SECRET": SECRET},
    )
    node.wait_ready(60)
    pr = load("pull_request.opened")
    pr["pull_request"]["requested_reviewers"] = copy.deepcopy(
        load("pull_request.review_requested")["pull_request"]["requested_reviewers"]
    )
    r = post(node, "pull_request", pr)
    assert r.status_code == 202, r.text
    assert [(x["seat"], x["reason"]) for x in r.json()["routed"]] == [("dev", "review_requested")]
    key = r.json()["linked"]["work_item"]
    rows = settled(node)
    assert Counter(t["seat"] for t in rows) == {"dev": 1}
    sync = copy.deepcopy(pr)
    sync["action"] = "synchronize"
    labeled = copy.deepcopy(pr)
    labeled["action"] = "labeled"
    labeled["pull_request"]["labels"] = [{"name": "needs-review"}]
    labeled["label"] = {"name": "needs-review"}
    r1 = post(node, "pull_request", sync)
    r2 = post(node, "pull_request", labeled)
    assert r1.status_code == 200 and r1.json()["status"] == "ignored", r1.text
    assert r2.status_code == 202 and r2.json()["routed"] == [] and r2.json()["woken"] == []
    assert len(settled(node)) == len(rows)  # nobody woken
    assert item(node, key)["labels"] == ["needs-review"]
    review = load("pull_request_review.submitted")  # state "commented": mirrored, not routed
    r = post(node, "pull_request_review", review)
    assert r.status_code in (200, 202) and r.json().get("routed", []) == []


def test_five_comments_while_busy_make_one_follow_up_turn(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    """CO-38: comments on one GitHub issue that arrive while its assignee is busy run as ONE
    follow-up turn carrying every constituent (the lead is GitHub's ``Codertocat``)."""
    from tests.fleet.llm import FleetLLM

    llm = FleetLLM()
    try:
        data = yaml.safe_load((REPO / "examples" / "company.yaml").read_text())
        data["providers"]["llm"] = {"default": llm.entry()}
        eng = next(u for u in data["units"] if u["id"] == "eng")
        next(r for r in eng["roles"] if r["handle"] == "lead")["identities"] = {"github_login": "Codertocat"}
        company = tmp_path / "company.yaml"
        company.write_text(yaml.safe_dump(data))
        node = start_node(
            "run",
            "--data-dir",
            str(tmp_path / "data"),
            "--company",
            str(company),
            env={"GITHUB_WEBHOOK_SECRET": SECRET},
        )
        node.wait_ready(60)
        llm.delays["lead"] = 4.0
        r = post(node, "issues", load("issues.opened"))  # assigned to Codertocat: routed to the lead
        assert r.status_code == 202 and [x["seat"] for x in r.json()["routed"]] == ["lead"], r.text
        llm.wait_first_round("lead", 0)
        for i in range(5):
            comment = load("issue_comment.created")
            comment["comment"]["id"] += i + 1
            comment["comment"]["body"] = f"follow-up number {i + 1}"
            answer = post(node, "issue_comment", comment)
            assert answer.status_code == 202 and answer.json()["woken"] == ["lead"], answer.text
        llm.delays.pop("lead")
        rows = settled(node, 3.0)
        lead = sorted((t for t in rows if t["seat"] == "lead"), key=lambda t: t["started_at"])
        assert len(lead) == 2, rows
        follow_up = trigger_of(node, lead[1]["turn_id"])
        assert len(follow_up["constituent_ids"]) == 5
        assert all(f"follow-up number {i}" in follow_up["text"] for i in range(1, 6))
    finally:
        llm.stop()


def test_what_a_new_user_broke(node: Node) -> None:
    """A 40 KiB body is mirrored cut (never a 500); an unidentifiable issue is 400 naming the field;
    the first delivery about an issue may be ``closed`` (the item starts done); a redelivered
    ``opened`` (new delivery id) wakes nobody again."""
    big = load("issues.opened")
    big["issue"].update(number=501, body="é" * 40_000)
    r = post(node, "issues", big)
    assert r.status_code == 202, r.text
    got = item(node, r.json()["linked"]["work_item"])
    assert len(got["body"].encode()) <= 32 * 1024 and "[cut: the GitHub text is 80000 bytes" in got["body"]
    for mutate, field in (
        (lambda b: b["issue"].pop("number"), "issue.number"),
        (lambda b: b["issue"].update(number="1"), "issue.number"),
        (lambda b: b.pop("repository"), "repository.id"),
        (lambda b: b.update(issue=None), "issue"),
    ):
        bad = load("issues.opened")
        mutate(bad)
        r = post(node, "issues", bad)
        assert r.status_code == 400 and r.json()["detail"].startswith(field), (field, r.text)
    closed = issue_event("closed", number=502, state="closed")
    r = post(node, "issues", closed)
    assert r.status_code == 202 and r.json()["linked"]["outcome"] == "created", r.text
    assert item(node, r.json()["linked"]["work_item"])["status"] == "done"
    again = post(node, "issues", load("issues.opened"))  # #1 is not linked yet here: it creates it
    assert again.json()["routed"] != []
    before = len(settled(node))
    repeat = post(node, "issues", load("issues.opened"))
    assert repeat.status_code == 200 and repeat.json()["status"] == "ignored", repeat.text
    assert len(settled(node)) == before
