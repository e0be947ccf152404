"""One data node, end to end: a real node process on a real nats-server, driven over REST and the CLI.

Covers the tracker (CO-24), the knowledge base and its import (CO-25, ES-65), file rows on the nats
object store (CO-26, ES-74), the event log (ES-77), read levels and floors (ES-25, ES-27), and the
bad-input rules of the issue (each refusal names its field; nothing is half-written).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest

from shared import coordination
from shared.router import EstateRouter, NobodyAnswered
from tests.support.procs import REPO, SHARED, TOKEN, NatsServer, Node, free_port, node_file

KNOWLEDGE = SHARED / "data" / "knowledge"
H = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path_factory.mktemp("nats"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory, broker: NatsServer) -> Iterator[Node]:
    d = tmp_path_factory.mktemp("n1")
    port = free_port()
    cfg = node_file(
        d,
        node_id="n1",
        port=port,
        stream={"type": "nats", "url": broker.url},
        coordination={"type": "embedded-kv"},
    )
    n = Node(
        ["node", "--node", str(cfg), "--company", str(REPO / "examples" / "company.yaml")], dir=d, port=port
    )
    try:
        n.wait_ready(60)
        yield n
    finally:
        n.stop()


@pytest.fixture
def api(node: Node) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=node.url, headers=H, timeout=30.0) as c:
        yield c


def _cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CREWLET_API_TOKEN": TOKEN, "CREWLET_URL": url}
    return subprocess.run(
        [sys.executable, "-m", "crewlet.knowledge_cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=REPO,
    )


def test_tracker_round_trip_and_refusals(api: httpx.Client) -> None:
    # assigned to a human, so no seat is woken to comment on it while the test reads it back
    r = api.post(
        "/work", json={"project": "ENG", "title": "Lantern flickers", "type": "bug", "assignee": "founder"}
    )
    assert r.status_code == 201, r.text
    made = r.json()
    key = made["item"]["key"]
    assert re.fullmatch(r"ENG-\d+", key) and made["outcome"] == "applied"
    assert re.fullmatch(r"CREWLET_TRACKER_LOG@1:\d+", made["position_token"])  # ES-15
    got = api.get(f"/work/{key}", params={"min_position": made["position_token"]}).json()
    assert got["title"] == "Lantern flickers" and got["version"] == 1 and got["read"]["served_by"] == "n1"
    up = api.patch(f"/work/{key}", json={"if_match": 1, "status": "in_progress"})
    assert up.status_code == 200 and up.json()["item"]["version"] == 2
    stale = api.patch(f"/work/{key}", json={"if_match": 1, "status": "done"})
    assert stale.status_code == 409 and stale.json()["detail"]["current_version"] == 2
    body_no_match = api.patch(f"/work/{key}", json={"body": "new body"})
    assert body_no_match.status_code == 400 and body_no_match.json()["detail"]["field"] == "if_match"
    c = api.post(f"/work/{key}/comments", json={"body": "Seen on 0.4.2 too"})
    assert c.status_code == 201
    full = api.get(f"/work/{key}", params={"min_position": c.json()["position_token"]}).json()
    assert [x["body"] for x in full["comments"]] == ["Seen on 0.4.2 too"]
    assert [h["kind"] for h in full["history"]] == ["created", "updated", "commented"]
    listed = api.get("/work", params={"project": "ENG", "status_group": "active"}).json()
    assert key in [i["key"] for i in listed["items"]]
    # ES-25: a stale read says its level and its lag in records (the node's own seats may append
    # meanwhile, so a record or two may be in flight: the figure is reported, not promised zero)
    assert listed["read"]["level"] == "stale" and set(listed["read"]["lag"]) == {"records"}
    assert 0 <= listed["read"]["lag"]["records"] <= 5
    # Bad input: each refusal names its field; nothing is written.
    assert api.get("/work/eng-1").json() == {
        "error": "invalid",
        "detail": {"field": "key", "message": "'eng-1' is not a work item key (PROJECT-N, e.g. ENG-4) or id"},
    }
    nope = api.post("/work", json={"project": "NOPE", "title": "x"})
    assert nope.status_code == 404 and nope.json()["detail"] == {
        "what": "project",
        "key": "NOPE",
        "message": "no project 'NOPE'",
    }
    bug = api.post("/work", json={"project": "ENG", "title": "x", "type": "Bug"})
    assert (
        bug.status_code == 400
        and bug.json()["detail"]["field"] == "type"
        and "bug" in bug.json()["detail"]["message"]
    )
    session = api.get("/work", params={"read_level": "session"})
    assert session.status_code == 400 and session.json()["detail"]["field"] == "read_level"
    assert api.get("/work/ENG-99999").status_code == 404


def test_a_retried_rest_write_lands_once(api: httpx.Client) -> None:
    first = api.post("/work", json={"project": "SUP", "title": "Retry me once"}).json()
    again = api.post("/work", json={"project": "SUP", "title": "Retry me once", "op_id": first["op_id"]})
    assert again.status_code == 201 and again.json()["item"]["key"] == first["item"]["key"]
    assert again.json()["position"] == first["position"]
    hits = api.get("/work", params={"project": "SUP", "text": "Retry"}).json()["items"]
    assert [h["key"] for h in hits] == [first["item"]["key"]]
    forged = api.post("/work", json={"project": "SUP", "title": "x", "op_id": "my-own-id"})
    assert forged.status_code == 400 and forged.json()["detail"]["field"] == "op_id"


def test_knowledge_import_search_and_reimport(api: httpx.Client, node: Node, tmp_path: Path) -> None:
    out = _cli("import", str(KNOWLEDGE), "--space", "ENG", url=node.url)
    assert out.returncode == 0, out.stderr + out.stdout
    assert "16 page(s): 16 created" in out.stdout
    files = sorted(KNOWLEDGE.rglob("*.md"))
    words = {f: set(re.findall(r"[a-z]{7,}", f.read_text().lower())) for f in files}
    unique = {f: sorted(words[f] - set().union(*(words[g] for g in files if g != f))) for f in files}
    target = next(f for f in files if f.parent.name == "nimbus-docs" and unique[f])
    word = unique[target][0]
    found = api.get("/knowledge/search", params={"q": word}).json()
    assert found["state"] == "ok" and found["hits"], found
    top = api.get(f"/knowledge/pages/{found['hits'][0]['page_id']}").json()
    assert top["body"].strip() == target.read_text().strip()
    assert len(found["hits"][0]["snippet"]) <= 200
    nothing = api.get("/knowledge/search", params={"q": "zzyzxqwv"}).json()
    assert nothing["state"] == "empty" and nothing["hits"] == [] and "matched" in nothing["sentence"]
    versions = {
        p["title"]: p["version"] for p in api.get("/knowledge/pages", params={"space": "ENG"}).json()["pages"]
    }
    again = _cli("import", str(KNOWLEDGE), "--space", "ENG", url=node.url)
    assert again.returncode == 0 and "16 unchanged" in again.stdout, again.stdout
    after = {
        p["title"]: p["version"] for p in api.get("/knowledge/pages", params={"space": "ENG"}).json()["pages"]
    }
    assert after == versions
    # A non-UTF-8 file refuses the whole import, naming the file; nothing is written.
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "good.md").write_text("# Good page\nfine words\n")
    (bad / "latin1.md").write_bytes("# Caf\xe9\n".encode("latin-1"))
    refused = _cli("import", str(bad), "--space", "SUP", url=node.url)
    assert refused.returncode == 2 and "latin1.md: not UTF-8" in refused.stderr
    assert api.get("/knowledge/pages", params={"space": "SUP"}).json()["count"] == 0
    unknown = _cli("import", str(KNOWLEDGE), "--space", "NOPE", url=node.url)
    assert unknown.returncode == 2 and "space 'NOPE' does not exist" in unknown.stderr


def test_an_empty_and_a_wordless_query_answer_one_error_shape(api: httpx.Client) -> None:
    """Issue 12: no ``q``, ``q=`` and ``q=?!...`` are refused alike; ``/work?text=`` is the plain list."""
    answers = [api.get("/knowledge/search", params={"q": q}) for q in ("", "   ", "?!...")]
    answers.append(api.get("/knowledge/search"))
    assert {r.status_code for r in answers} == {400}
    bodies = [r.json() for r in answers]
    assert bodies[0]["error"] == "invalid" and bodies[0]["detail"]["field"] == "q", bodies[0]
    assert bodies[1] == bodies[0] and bodies[2] == bodies[0] and bodies[3] == bodies[0], bodies
    assert api.get("/work", params={"text": ""}).status_code == 200
    wordless = api.get("/work", params={"text": "?!..."})
    assert wordless.status_code == 400 and wordless.json()["error"] == "invalid"
    assert wordless.json()["detail"]["field"] == "text"
    assert wordless.json()["detail"]["message"] == bodies[0]["detail"]["message"]
    # an offset past what SQLite holds is bad input (4xx naming it), never a 503 to retry
    for path, params in (("/work", {"text": "x"}), ("/knowledge/pages", {})):
        huge = api.get(path, params={**params, "offset": str(2**63)})
        assert huge.status_code in (400, 422) and "offset" in huge.text, (path, huge.text)


def test_page_limits_and_conflicts(api: httpx.Client) -> None:
    big = api.post(
        "/knowledge/pages", json={"space": "SUP", "title": "Huge", "body": "x" * (1024 * 1024 + 1)}
    )
    assert big.status_code == 413 and big.json()["detail"]["field"] == "body"
    unknown = api.post("/knowledge/pages", json={"space": "NOPE", "title": "t", "body": "b"})
    assert unknown.status_code == 404 and unknown.json()["detail"]["what"] == "space"
    made = api.post(
        "/knowledge/pages", json={"space": "SUP", "title": "Escalation", "body": "Call the lead"}
    ).json()
    pid = made["page"]["id"]
    ok = api.put(f"/knowledge/pages/{pid}", json={"body": "Call the lead, then page", "if_match": 1})
    assert ok.status_code == 200 and ok.json()["page"]["version"] == 2
    stale = api.put(f"/knowledge/pages/{pid}", json={"body": "again", "if_match": 1})
    assert stale.status_code == 409 and stale.json()["detail"]["current_version"] == 2
    assert api.get("/knowledge/pages/not-an-id").json()["detail"]["field"] == "page_id"


async def _object_keys(url: str) -> set[str]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        try:
            info = await js.stream_info("OBJ_crewlet-files", subjects_filter="$O.crewlet-files.M.>")
        except nats.js.errors.NotFoundError:
            return set()
        return set((info.state.subjects or {}).keys())
    finally:
        await nc.close()


def test_files_round_trip_and_refusals(api: httpx.Client, broker: NatsServer) -> None:
    data = os.urandom(20 * 1024 * 1024)
    up = api.put(
        "/projects/ENG/files/builds/lantern.tar", content=data, headers={"content-type": "application/x-tar"}
    )
    assert up.status_code == 201, up.text
    row = up.json()["file"]
    assert (
        row["size"] == len(data) and row["sha256"] == hashlib.sha256(data).hexdigest() and row["version"] == 1
    )
    with api.stream("GET", "/projects/ENG/files/builds/lantern.tar") as r:
        assert r.status_code == 200 and r.headers["content-type"] == "application/x-tar"
        back = b"".join(r.iter_bytes())
    assert back == data
    listed = api.get("/projects/ENG/files").json()["files"]
    assert [(f["path"], f["version"]) for f in listed] == [("builds/lantern.tar", 1)]
    v2 = api.put("/projects/ENG/files/builds/lantern.tar", content=b"tiny", headers={"If-Match": "1"})
    assert v2.status_code == 201 and v2.json()["file"]["version"] == 2
    stale = api.put("/projects/ENG/files/builds/lantern.tar", content=b"tinier", headers={"If-Match": "1"})
    assert stale.status_code == 409 and stale.json()["detail"]["current_version"] == 2
    old = api.get("/projects/ENG/files/builds/lantern.tar", params={"version": 1})
    assert old.status_code == 200 and old.content == data
    keys_before = asyncio.run(_object_keys(broker.url))
    for path in ("..%2Fescape.txt", "a/..%2F..%2Fb", "%2Fetc%2Fpasswd"):
        bad = api.put(f"/projects/ENG/files/{path}", content=b"x")
        assert bad.status_code == 400 and bad.json()["detail"]["field"] == "path", (path, bad.text)
    empty = api.put("/projects/ENG/files/empty.txt", content=b"")
    assert empty.status_code == 400 and empty.json()["detail"]["field"] == "content"
    ghost = api.put("/projects/NOPE/files/a.txt", content=b"never stored")
    assert ghost.status_code == 404 and ghost.json()["detail"]["key"] == "NOPE"
    assert asyncio.run(_object_keys(broker.url)) == keys_before  # no bytes without a row
    assert api.get("/projects/ENG/files/missing.txt").status_code == 404
    assert api.get("/projects/NOPE/files").status_code == 404


def test_events_are_kept_once_and_paged(api: httpx.Client) -> None:
    made = api.post("/work", json={"project": "SUP", "title": "Event me"}).json()
    api.post("/work", json={"project": "SUP", "title": "Event me", "op_id": made["op_id"]})
    for i in range(3):
        api.post("/work", json={"project": "SUP", "title": f"page {i}"})
    time.sleep(0.2)
    mine = api.get(
        "/events", params={"event_type": "work_item.created", "task_id": made["item"]["key"]}
    ).json()
    assert [e["event_id"] for e in mine["events"]] == [made["op_id"]]
    first = api.get("/events", params={"limit": 2}).json()
    second = api.get("/events", params={"limit": 2, "before": first["next"]}).json()
    assert len(first["events"]) == 2 and first["next"] and second["events"]
    assert not {e["event_id"] for e in first["events"]} & {e["event_id"] for e in second["events"]}
    assert first["events"][0]["event_time"] >= second["events"][0]["event_time"]
    assert api.get("/events", params={"limit": 401}).status_code == 400
    one = api.get(f"/events/{made['op_id']}").json()
    assert one["event_type"] == "work_item.created" and one["data"]["object"]["key"] == made["item"]["key"]
    assert api.get("/events/no-such-event").status_code == 404


def test_write_and_read_cost_beside_a_raw_publish(api: httpx.Client, broker: NatsServer) -> None:
    """Prints medians measured in one run (ratios, not absolute times, are the result)."""

    async def raw() -> list[float]:
        nc = await nats.connect(broker.url)
        js = nc.jetstream()
        await js.add_stream(name="RAWBENCH", subjects=["rawbench.>"])
        out = []
        for i in range(100):
            t = time.perf_counter()
            await js.publish(f"rawbench.{i}", b"x" * 300)
            out.append(time.perf_counter() - t)
        await nc.close()
        return out

    writes, reads, probes = [], [], []
    for i in range(100):
        t = time.perf_counter()
        assert api.get("/health").status_code == 200
        probes.append(time.perf_counter() - t)
        t = time.perf_counter()
        r = api.post("/work", json={"project": "ENG", "title": f"bench {i}"})
        writes.append(time.perf_counter() - t)
        t = time.perf_counter()
        g = api.get(f"/work/{r.json()['item']['key']}")
        reads.append(time.perf_counter() - t)
        assert g.status_code == 200
    pub = asyncio.run(raw())
    ms = {
        k: round(statistics.median(v) * 1000, 3)
        for k, v in (
            ("raw_publish", pub),
            ("bare_http_probe", probes),
            ("rest_write", writes),
            ("rest_local_read", reads),
        )
    }
    print(f"\nREST cost on one data node (median ms, n=100, same run): {ms}")
    assert all(v > 0 for v in ms.values())


def test_zz_with_its_only_data_node_gone_reads_fail_naming_it(node: Node, broker: NatsServer) -> None:
    """Runs last in this module: it kills the module's node."""
    node.signal(9)
    node.wait(10)

    async def ask() -> tuple[Exception | None, dict[str, Any]]:
        nc = await nats.connect(broker.url)
        try:
            coord = await coordination.provision(nc.jetstream(timeout=5.0), lease_ttl=timedelta(seconds=45))
            router = EstateRouter(nc, coord, node_id="outsider", read_wait=2.0)
            err: Exception | None = None
            try:
                await router.get_work_item("ENG-1")
            except NobodyAnswered as e:
                err = e
            return err, await router.search_knowledge("lantern")
        finally:
            await nc.close()

    err, search = asyncio.run(ask())
    assert isinstance(err, NobodyAnswered) and [(r.node, r.said) for r in err.replies] == [
        ("n1", "no_responders")
    ]
    assert search["data"]["failed"] and "could not be searched" in search["data"]["sentence"]
