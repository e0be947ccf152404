"""Bad input at the edge of a running node: what each refusal answers, and that a refused request
published nothing (the agent stream's last sequence does not move), stored nothing (no delivery
claim: the same delivery id is accepted afterwards) and ran nothing (no turn, no work item)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.procs import REPO, TOKEN, VENV_BIN, Node, write_yaml

from .support import GITHUB_ISSUE, SECRET, Broker, post_github, post_message, sign, turns_of, wait_for

MIB = 1024 * 1024


def _error(r: httpx.Response) -> str:
    return str(r.json().get("error"))


def test_refused_webhooks_and_messages_publish_and_store_nothing(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    node = start_node("run", "--data-dir", str(tmp_path / "data"), env={"GITHUB_WEBHOOK_SECRET": SECRET})
    node.wait_ready()
    broker = Broker(tmp_path / "data" / "node-0")
    published = broker.last_seq()
    assert broker.kv_keys("claims") == []
    delivery = "refused-then-accepted-0001"

    # signatures: missing, from another secret, not sha256, over another body → 401
    r = post_github(node, delivery=delivery, signature=None)
    assert (r.status_code, _error(r)) == (401, "bad_signature"), r.text
    body = GITHUB_ISSUE.read_bytes()
    for bad in (
        sign(body, "not-the-secret"),
        "sha1=" + sign(body)[7:47],
        sign(body + b" "),
        sign(body).upper(),
        "sha256=",
    ):
        r = post_github(node, delivery=delivery, signature=bad)
        assert (r.status_code, _error(r)) == (401, "bad_signature"), (bad, r.text)
    # a signed body that is not a JSON object → 400
    for raw in (b"issue opened", b"{not json", b"[1, 2]", b"\xff\xfe"):
        r = post_github(node, raw, delivery=delivery)
        assert (r.status_code, _error(r)) == (400, "invalid_json"), (raw, r.text)
    # over 5 MiB → 413, declared or streamed in chunks (never buffered past the cap)
    big = b'{"pad": "' + b"x" * (5 * MIB) + b'"}'
    r = post_github(node, big, delivery=delivery)
    assert (r.status_code, _error(r)) == (413, "body_too_large"), r.text

    def chunks() -> Iterator[bytes]:
        for i in range(0, len(big), 256 * 1024):
            yield big[i : i + 256 * 1024]

    r = httpx.post(
        f"{node.url}/webhooks/inbound/github",
        content=chunks(),
        headers={"X-GitHub-Delivery": delivery, "X-Hub-Signature-256": sign(big), "X-GitHub-Event": "issues"},
        timeout=30,
    )
    assert (r.status_code, _error(r)) == (413, "body_too_large"), r.text
    # exactly 5 MiB is allowed through the size check (and then judged on its signature)
    edge = b'{"pad": "' + b"x" * (5 * MIB - 11) + b'"}'
    assert len(edge) == 5 * MIB
    r = post_github(node, edge, delivery=delivery, signature="sha256=" + "0" * 64)
    assert (r.status_code, _error(r)) == (401, "bad_signature"), r.text
    # an unknown source → 404; a source whose secret is unset → 503 with Retry-After
    r = post_github(node, source="gitlab", delivery=delivery)
    assert (r.status_code, _error(r)) == (404, "unknown_source"), r.text
    r = post_github(node, source="forms", delivery=delivery)
    assert (r.status_code, _error(r)) == (503, "webhook_secret_unset"), r.text
    assert r.headers["retry-after"] == "60"
    # a signed delivery without its id → 400
    r = httpx.post(
        f"{node.url}/webhooks/inbound/github",
        content=body,
        headers={"X-Hub-Signature-256": sign(body), "X-GitHub-Event": "issues"},
        timeout=30,
    )
    assert (r.status_code, _error(r)) == (400, "missing_delivery_id"), r.text

    # messages: unknown seat 404, human seat 409, bad bodies 400, no token 401
    r = post_message(node, "nobody", "hello")
    assert (r.status_code, _error(r)) == (404, "unknown_seat"), r.text
    r = post_message(node, "founder", "hello")
    assert (r.status_code, _error(r)) == (409, "human_seat_has_no_inbox"), r.text
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    for raw_body in (
        b"not json",
        b'{"text": ""}',
        b'{"text": "hi", "surprise": 1}',
        b'{"text": "x", "kind": "poke"}',
    ):
        r = httpx.post(f"{node.url}/seats/triage/messages", content=raw_body, headers=auth, timeout=10)
        assert (r.status_code, _error(r)) == (400, "invalid_request"), (raw_body, r.text)
    r = httpx.post(f"{node.url}/seats/triage/messages", json={"text": "hi"}, timeout=10)
    assert r.status_code == 401, r.text
    r = node.get("/messages/00000000-0000-4000-8000-000000000000")
    assert (r.status_code, _error(r)) == (404, "unknown_message"), r.text
    r = node.get("/messages/not%20an%20id")
    assert r.status_code == 400, r.text

    # nothing was published, claimed, run or filed
    assert broker.last_seq() == published
    assert broker.kv_keys("claims") == []
    assert turns_of(node) == []
    assert node.get("/work?project=SUP").json()["count"] == 0

    # the refusals claimed nothing: the same delivery id, now signed right, is accepted and worked
    r = post_github(node, delivery=delivery)
    assert r.status_code == 202 and r.json()["status"] == "accepted", r.text
    # exactly one message reached triage (the stream may also hold the lead's wake by now)
    triage = broker.inbox("triage")
    assert triage["pending"] + triage["delivered"] == 1, triage
    assert broker.last_seq() >= published + 1
    assert len(broker.kv_keys("claims")) == 1

    def two_done() -> list[dict[str, Any]] | None:
        rows = [t for t in turns_of(node) if t["outcome"] != "running"]
        return rows if len(rows) == 2 else None

    wait_for("the accepted delivery's two turns", two_done, timeout=20, node=node)
    # a replayed delivery id → 200 duplicate: nothing published, so no second turn can start
    after = broker.last_seq()
    for _ in range(3):
        r = post_github(node, delivery=delivery)
        assert r.status_code == 200 and r.json() == {"status": "duplicate", "delivery": delivery}, r.text
    assert broker.last_seq() == after
    assert sorted(t["seat"] for t in turns_of(node)) == ["lead", "triage"]
    assert node.get("/work?project=SUP").json()["count"] == 1
    logged = [e for e in node.events() if e.get("event") == "webhook_signature_rejected"]
    assert len(logged) == 7 and all(json.dumps(e).find(SECRET) < 0 for e in logged)


def test_a_webhook_cannot_be_routed_to_a_human_or_unknown_seat(tmp_path: Path) -> None:
    """The webhook route has no 409/404-seat answer to give at run time: the company document
    that would need one is refused when it is validated (and so never applied)."""
    data = yaml.safe_load((REPO / "examples" / "company.yaml").read_text())
    for route, message in (
        ("founder", "routes to human seat 'founder', which has no inbox"),
        ("nobody", "'nobody' names no seat handle or unit id"),
    ):
        data["integrations"]["webhooks"][1]["route_to"] = route
        path = write_yaml(tmp_path / f"{route}.yaml", data)
        out = subprocess.run(
            [str(VENV_BIN / "crewlet"), "validate", "--company", str(path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 2, out.stdout + out.stderr
        assert f"{path}: integrations.webhooks[1].route_to: {message}" in out.stderr
