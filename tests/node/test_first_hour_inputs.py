"""What a newcomer types in the first hour, against one running node (issue 38).

The node runs ``data`` and ``ingress`` only (``crewlet run --roles data,ingress``), so nothing
consumes a seat's inbox: what the generic webhook published stays on the stream to be read.

- the generic webhook: a signed body whose event would not fit one broker message is refused 413
  naming the limit (it was a 500), and the text the seat reads is cut to 32 000 characters (a 4 MiB
  ``message`` was published whole, and was itself a 500 since text and body did not fit together);
- a bidirectional control (U+202E) or NUL in a file path, a work item title or the company name is
  refused naming the field, and the CLI prints such characters escaped where it prints user text;
- ``GET /work/{key}`` and ``crewlet work show`` page comments and history, oldest first, with totals;
- ``crewlet fleet broker list`` on a single node shows its one member as voter and leader.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import yaml

from tests.node.test_operator_cli import crewlet
from tests.support.procs import REPO, TOKEN, Node, free_port

H = {"Authorization": f"Bearer {TOKEN}"}
SECRET = "first-hour-forms-secret-0123456789"
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("first-hour") / "data"


@pytest.fixture(scope="module")
def node(data_dir: Path) -> Iterator[Node]:
    port = free_port()
    argv = ["run", "--data-dir", str(data_dir), "--port", str(port), "--roles", "data,ingress"]
    n = Node(argv, dir=data_dir.parent, port=port, env={"FORMS_WEBHOOK_SECRET": SECRET})
    try:
        n.wait_ready(90)
        yield n
    finally:
        n.stop()


def _post_form(node: Node, body: bytes, delivery: str) -> httpx.Response:
    sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    headers = {"Content-Type": "application/json", "X-Hub-Signature-256": sig, "X-Request-Id": delivery}
    return httpx.post(f"{node.url}/webhooks/inbound/forms", content=body, headers=headers, timeout=60)


def _last_inbox_event(data_dir: Path, seat: str) -> dict[str, Any]:
    """The newest envelope on ``seat``'s inbox subject, read from the node's embedded broker."""
    import nats

    from shared.bus import inbox_subject

    ports = sorted((data_dir / "node-0" / "broker").glob("*.ports"), key=lambda p: p.stat().st_mtime)
    url = json.loads(ports[-1].read_text())["nats"][0]

    async def go() -> dict[str, Any]:
        nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=0)
        try:
            msg = await nc.jetstream().get_last_msg("CREWLET_AGENT", inbox_subject(seat))
            event: dict[str, Any] = json.loads(msg.data)
            return event
        finally:
            await nc.close()

    return asyncio.run(go())


def test_a_webhook_event_fits_one_broker_message_and_its_text_is_capped(node: Node, data_dir: Path) -> None:
    # 4 MiB of text: accepted, the whole body kept in payload.body, the text cut to 32 000 characters
    body = json.dumps({"message": "m" * (4 * MIB)}).encode()
    r = _post_form(node, body, "big-text-0001")
    assert r.status_code == 202, r.text
    event = _last_inbox_event(data_dir, "triage")
    assert event["id"] == r.json()["event_id"]
    text = event["payload"]["text"]
    assert len(text) == 32_000 and text.startswith("m" * 1000)
    assert text.endswith(
        f"[cut: the webhook text is {4 * MIB} characters; the whole body is in the event's payload.body]"
    )
    assert len(event["payload"]["body"]["message"]) == 4 * MIB
    # a body within the 5 MiB cap whose event would not fit one message (1e5 serialises as
    # 100000.0): 413 naming the limit, nothing claimed, so the same delivery id is taken later
    n = (5 * MIB - 64) // 4
    numbers = b'{"message": "hi", "n": [' + b",".join([b"1e5"] * n) + b"]}"
    assert len(numbers) <= 5 * MIB
    r = _post_form(node, numbers, "too-big-0001")
    assert r.status_code == 413, r.text
    assert r.json()["error"] == "body_too_large"
    assert "at most 8323072 bytes" in r.json()["detail"]
    r = _post_form(node, json.dumps({"message": "a short one"}).encode(), "too-big-0001")
    assert r.status_code == 202, r.text
    assert _last_inbox_event(data_dir, "triage")["payload"]["text"] == "a short one"


@pytest.mark.parametrize("hidden", ["\u202e", "\u2066", "\x00"])
def test_hidden_characters_are_refused_naming_the_field(node: Node, hidden: str) -> None:
    r = httpx.post(
        f"{node.url}/work", headers=H, json={"project": "ENG", "title": f"fix{hidden}txt.exe"}, timeout=30
    )
    assert r.status_code == 400, r.text
    assert r.json().get("field") == "title" or "title" in r.text, r.text
    r = httpx.post(f"{node.url}/work", headers=H, json={"project": "ENG", "title": "plain"}, timeout=30)
    assert r.status_code == 201, r.text
    key = r.json()["item"]["key"]
    r = httpx.patch(f"{node.url}/work/{key}", headers=H, json={"title": f"re{hidden}named"}, timeout=30)
    assert r.status_code == 400 and "title" in r.text, r.text
    if hidden != "\x00":  # a NUL in a URL path is refused before the route (a control character)
        path = quote(f"{hidden}txt.exe")
        r = httpx.put(f"{node.url}/projects/ENG/files/{path}", headers=H, content=b"MZ", timeout=30)
        assert r.status_code == 400 and "path" in r.text, r.text
    company = yaml.safe_load((REPO / "examples" / "company.yaml").read_text())
    company["name"] = f"Acme{hidden}"
    r = httpx.put(
        f"{node.url}/config",
        headers={**H, "X-Summary": "rename"},
        params={"dry_run": "true"},
        json=company,
        timeout=30,
    )
    assert r.status_code in (400, 422) and "name" in r.text and "holds " in r.text, r.text


def test_the_cli_prints_bidi_controls_escaped(node: Node) -> None:
    r = httpx.post(f"{node.url}/work", headers=H, json={"project": "ENG", "title": "shown"}, timeout=30)
    key = r.json()["item"]["key"]
    r = httpx.post(
        f"{node.url}/work/{key}/comments", headers=H, json={"body": "see \u202etxt.exe"}, timeout=30
    )
    assert r.status_code == 201, r.text
    out = crewlet("work", "show", key, url=node.url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "see \\u202etxt.exe" in out.stdout
    assert "\u202e" not in out.stdout


def test_work_show_pages_comments_and_history_oldest_first(node: Node) -> None:
    r = httpx.post(f"{node.url}/work", headers=H, json={"project": "ENG", "title": "chatty"}, timeout=30)
    key = r.json()["item"]["key"]
    for i in range(50):
        r = httpx.post(f"{node.url}/work/{key}/comments", headers=H, json={"body": f"c{i}"}, timeout=30)
        assert r.status_code == 201, r.text
    item = httpx.get(f"{node.url}/work/{key}", headers=H, timeout=30).json()
    assert (item["comments_total"], item["comments_offset"]) == (50, 30)
    assert [c["body"] for c in item["comments"]] == [f"c{i}" for i in range(30, 50)]
    stamps = [c["created_at"] for c in item["comments"]]
    assert stamps == sorted(stamps)
    assert item["history_total"] >= 1 and item["history_offset"] == max(item["history_total"] - 20, 0)
    page = httpx.get(
        f"{node.url}/work/{key}", headers=H, params={"comments_offset": 0, "comments_limit": 5}, timeout=30
    ).json()
    assert [c["body"] for c in page["comments"]] == ["c0", "c1", "c2", "c3", "c4"]
    assert page["comments_total"] == 50
    r = httpx.get(f"{node.url}/work/{key}", headers=H, params={"comments_limit": 101}, timeout=30)
    assert r.status_code == 400 and "comments_limit" in r.text, r.text
    out = crewlet("work", "show", key, url=node.url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "comments (showing 20 of 50, #31..#50, oldest first;" in out.stdout
    assert out.stdout.index(": c30") < out.stdout.index(": c49")
    out = crewlet("work", "show", key, "--comments-offset", "0", "--comments-limit", "3", url=node.url)
    assert (
        "comments (showing 3 of 50, #1..#3" in out.stdout
        and ": c2" in out.stdout
        and ": c3\n" not in out.stdout
    )
    assert "history (" in out.stdout


def test_fleet_broker_list_on_one_node_shows_its_member(node: Node) -> None:
    view = httpx.get(f"{node.url}/fleet/broker", headers=H, timeout=30).json()
    assert "group_error" not in view, view
    assert view["group"]["leader"] == "node-0"
    assert [(p["name"], p["leader"]) for p in view["group"]["peers"]] == [("node-0", True)]
    assert view["findings"] == []
    out = crewlet("fleet", "broker", "list", url=node.url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "no live member to ask" not in out.stdout
    row = next(line for line in out.stdout.splitlines() if "node-0" in line and "data,ingress" in line)
    assert "yes" in row and "?" not in row
    assert "(one server, not clustered)" in out.stdout and "leader node-0" in out.stdout
