"""Broker membership (FL-147..FL-150): list the metadata group beside presence, remove a dead member.

The real-process test runs three embedded members (clustered child nats-servers with leaf
listeners, :class:`tests.support.embedded.EmbeddedFleet`), kills one for good, names it through
``crewlet fleet broker list``, refuses every bad removal without changing anything, removes it, and
starts a wiped replacement under a new node id; the streams are R3 again once it joins. The
external-cluster test runs one node on a plain nats-server. Unit tests pin the peer-id derivation,
the findings and the removal judgement on fake inputs.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import nats
import pytest
from nats.js.api import StreamConfig

from shared.broker._membership import (
    UNKNOWN_NAME,
    MembershipRefused,
    broker_view,
    findings,
    group_from_jsz,
    member_subject,
    peer_id,
    plan_removal,
)
from shared.broker._membership_ops import Membership
from tests.fleet.harness import wait_for
from tests.support.embedded import EmbeddedFleet
from tests.support.procs import TOKEN, VENV_BIN, NatsServer, Node, free_port, node_file

H = {"Authorization": f"Bearer {TOKEN}"}


# -- units ----------------------------------------------------------------------------------------


def test_peer_id_is_nats_servers_hash_of_the_name() -> None:
    # values read from nats-server 2.15.1's /jsz for servers named n1, n2, n3
    assert peer_id("n1") == "fjFyEjc1"
    assert peer_id("n2") == "44jzkV9D"
    assert peer_id("n3") == "BXScrY9i"
    assert all(len(peer_id(n)) == 8 for n in ("a", "node-c", "x" * 64))


def test_member_subject_is_one_token() -> None:
    assert member_subject("node-a") == "crewlet.fleet.broker.node-a"
    assert member_subject("a.b") == "crewlet.fleet.broker.a%2Eb"


def _presence(*rows: tuple[str, str]) -> list[dict[str, Any]]:
    return [{"id": n, "broker": k, "roles": ["data"]} for n, k in rows]


def _meta(leader: str, *others: tuple[str, bool]) -> dict[str, Any]:
    return {
        "name": "C",
        "leader": leader,
        "replicas": [
            {"name": n, "peer": peer_id(n) if n else peer_id("gone"), "current": cur, "active": 1_500_000_000}
            for n, cur in others
        ],
    }


def test_findings_name_each_disagreement() -> None:
    group = group_from_jsz(_meta("a", ("b", True), ("c", False), ("", False), ("e", True)), self_name="a")
    assert [p["name"] for p in group["peers"]] == ["a", "b", "c", "e", UNKNOWN_NAME]
    assert group["peers"][0]["self"] and group["peers"][0]["leader"] and group["peers"][1]["active"] == 1.5
    nodes = broker_view(
        node="a",
        kind="member",
        presence=_presence(
            ("a", "member"), ("b", "member"), ("e", "leaf"), ("f", "member"), ("g", "unknown")
        ),
        group=group,
        group_from="a",
        group_error=None,
    )["nodes"]
    got = {(f["kind"], f["node"], f["peer"]) for f in findings(nodes, group)}
    assert got == {
        ("dead_member", "c", peer_id("c")),
        ("dead_member", None, peer_id("gone")),  # nameless voter, listed by peer id
        ("dead_member", "e", peer_id("e")),  # came back as a leaf
        ("not_in_group", "f", peer_id("f")),
        ("unknown_kind", "g", peer_id("g")),
    }
    # as nats-server 2.15.1 answers on a survivor restarted since c died, before a leader is known:
    # the server itself among the replicas, c nameless (the shape read from a real /jsz)
    restarted = group_from_jsz(
        {
            "name": "C",
            "leader": "",
            "replicas": [
                {"name": f"Server name unknown at this time (peerID: {peer_id('c')})", "peer": peer_id("c")},
                {"name": "a", "current": True, "peer": peer_id("a")},
                {"name": "b", "current": False, "peer": peer_id("b")},
            ],
        },
        self_name="a",
    )
    assert [(p["name"], p["peer"]) for p in restarted["peers"]] == [
        ("a", peer_id("a")),
        ("b", peer_id("b")),
        (UNKNOWN_NAME, peer_id("c")),
    ]
    assert not restarted["peers"][0]["current"] and restarted["leader"] == ""
    # an unread group is never taken as empty: only what presence alone can say
    assert {f["kind"] for f in findings(nodes, None)} == {"unknown_kind"}
    view = broker_view(node="a", kind="member", presence=[], group=None, group_from=None, group_error="x")
    assert "group" not in view and view["group_error"] == "x"


def _view(presence: list[dict[str, Any]], meta: dict[str, Any], *, asker: str = "a") -> dict[str, Any]:
    group = group_from_jsz(meta, self_name=asker)
    return broker_view(
        node=asker, kind="member", presence=presence, group=group, group_from=asker, group_error=None
    )


def _refusal(view: dict[str, Any], **kw: Any) -> MembershipRefused:
    with pytest.raises(MembershipRefused) as e:
        plan_removal(view, **kw)
    return e.value


def test_plan_removal_judges_before_anything_changes() -> None:
    three = _meta("a", ("b", True), ("c", False))
    live_ab = _presence(("a", "member"), ("b", "member"))
    plan = plan_removal(_view(live_ab, three), node="c")
    assert (plan.peer, plan.node, plan.carriers, plan.voters, plan.live) == (
        peer_id("c"),
        "c",
        ("a", "b"),
        3,
        2,
    )
    by_peer = plan_removal(_view(live_ab, three), peer=peer_id("c"))
    assert by_peer.node == "c"
    assert _refusal(_view(live_ab, three), node="b").code == "node_live"
    forced = _refusal(_view(live_ab, three), node="b", force=True)  # would leave 2 voters, 1 live
    assert forced.code == "no_leader" and "2 voters with 1 live" in forced.detail
    assert _refusal(_view(live_ab, three), node="zz").code == "not_a_peer"
    lost_two = _refusal(_view(_presence(("a", "member")), three), node="c")
    assert lost_two.code == "no_leader" and "3 voters and 1 of them are live" in lost_two.detail
    # a node that came back as a leaf under the voter's name goes without force
    back_as_leaf = _presence(("a", "member"), ("b", "member"), ("c", "leaf"))
    assert plan_removal(_view(back_as_leaf, three), node="c").node == "c"
    # the asker carries it when it is a member other than the target
    as_b = _meta("a", ("a", True), ("c", False))
    assert plan_removal(_view(live_ab, as_b, asker="b"), node="c").carriers == ("b", "a")
    ext = {"node": "x", "kind": "client", "external": True, "nodes": [], "findings": []}
    assert _refusal(ext, node="c").code == "external"
    unread = broker_view(
        node="a", kind="member", presence=live_ab, group=None, group_from=None, group_error="down"
    )
    assert _refusal(unread, node="c").code == "no_meta_group"


# -- an external cluster --------------------------------------------------------------------------


def test_external_cluster_answers_external_and_refuses_removal(
    nats_server: NatsServer, start_node: Callable[..., Node], tmp_path: Path, example_company: Path
) -> None:
    port = free_port()
    path = node_file(
        tmp_path / "ext", node_id="ext-1", port=port, stream={"type": "nats", "url": nats_server.url}
    )
    node = start_node("node", "--node", str(path), "--company", str(example_company), name="ext", port=port)
    node.wait_ready(60)
    view = node.get("/fleet/broker").json()
    assert view == {"node": "ext-1", "kind": "client", "external": True, "nodes": [], "findings": []}
    r = httpx.post(f"{node.url}/fleet/broker/remove/ext-1?confirm=ext-1", headers=H, timeout=30)
    assert r.status_code == 409 and r.json()["error"] == "external", r.text


# -- three embedded members -----------------------------------------------------------------------


@pytest.fixture
def members(tmp_path: Path) -> Iterator[EmbeddedFleet]:
    """Three embedded members a, b, c booted together (no satellites)."""
    f = EmbeddedFleet(tmp_path, satellites=())
    try:
        f.start_all(timeout=120)
        yield f
    finally:
        f.stop()


def _broker(f: EmbeddedFleet, via: str) -> dict[str, Any]:
    with f.api(via) as c:
        r = c.get("/fleet/broker", timeout=20)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _voters(view: dict[str, Any]) -> list[str]:
    return [p["name"] for p in view.get("group", {}).get("peers", [])]


def _when(f: EmbeddedFleet, via: str, ok: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
    """``GET /fleet/broker`` on ``via`` when it answers and ``ok`` holds for it, else None (for :func:`wait_for`)."""
    try:
        view = _broker(f, via)
    except (AssertionError, httpx.HTTPError):
        return None  # e.g. 503 while a stream re-elects its leader after a kill -9 (infra-facts S4)
    return view if ok(view) else None


def _gone(f: EmbeddedFleet, via: str, node: str) -> list[dict[str, Any]] | None:
    """``GET /fleet`` on ``via``'s live nodes once it answers without ``node`` (its lease lapsed), else None."""
    try:
        rows = list(f.view(via)["nodes"])
    except (AssertionError, httpx.HTTPError):
        return None
    return rows if node not in {n["id"] for n in rows} else None


def _cli(*args: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENV_BIN / "crewlet"), "fleet", "broker", *args, "--url", url],
        env={"CREWLET_API_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=200,
    )


def _child_url(f: EmbeddedFleet, name: str) -> str:
    """The client URL of node ``name``'s child nats-server (its ports file)."""
    (pid,) = f.brokers(name)
    ports = json.loads((f.root / name / "store" / "broker" / f"nats-server_{pid}.ports").read_text())
    return str(ports["nats"][0])


async def _replication(url: str) -> tuple[list[str], str]:
    """``(streams configured R3 whose other two replicas are current, a create attempt's outcome)``."""
    nc = await nats.connect(url, connect_timeout=5, allow_reconnect=False)
    try:
        js = nc.jetstream(timeout=5)
        healthy = []
        for info in await js.streams_info():
            cl = info.cluster
            reps = cl.replicas if cl is not None else None
            if (
                cl is not None
                and info.config.num_replicas == 3
                and reps
                and len(reps) == 2
                and all(r.current for r in reps)
            ):
                names = ",".join(sorted(str(r.name) for r in reps))
                healthy.append(f"{info.config.name}@{cl.leader},{names}")
        try:
            await js.add_stream(
                StreamConfig(name="MEMBERSHIP_PROBE", subjects=["probe.membership"], num_replicas=3)
            )
            created = "created"
            await js.delete_stream("MEMBERSHIP_PROBE")
        except Exception as e:  # noqa: BLE001 - the outcome is what the test reads
            created = f"{type(e).__name__}: {e}"
        return healthy, created
    finally:
        await nc.close()


async def _from_outside(
    url: str, presence: list[dict[str, Any]], node: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """As a node holding no group (a leaf): read the group from the members, then remove ``node``.

    Both go over ``crewlet.fleet.broker.<member>``: the read asks every live member at once, the
    removal is forwarded to a live member other than the target (FL-148, FL-149).
    """
    nc = await nats.connect(url, connect_timeout=5, allow_reconnect=False)
    try:
        m = Membership(nc, node_id="outsider", kind="leaf")
        view = await m.view(presence)
        return view, await m.remove(presence, node=node)
    finally:
        await nc.close()


def _start_replacement(f: EmbeddedFleet, name: str, *, peers: tuple[str, ...]) -> None:
    """Start a new, wiped member right after a removal; it boots first time (its first R3 consumer
    create may meet 10023 "insufficient resources" while the group re-places, which it retries)."""
    f.start(name, file=f.member_file(name, peers=peers)).wait_ready(120)


@pytest.mark.fleet
@pytest.mark.timeout(600)
def test_remove_a_dead_member_and_replace_it(members: EmbeddedFleet, tmp_path: Path) -> None:
    f = members
    view = wait_for(
        "three current voters",
        lambda: _when(f, "a", lambda v: sorted(_voters(v)) == ["a", "b", "c"] and not v["findings"]),
        timeout=60,
    )
    assert view["external"] is False and view["kind"] == "member"
    assert {n["node"]: n["kind"] for n in view["nodes"]} == {"a": "member", "b": "member", "c": "member"}
    assert all(
        p["peer"] == peer_id(p["name"]) for p in view["group"]["peers"]
    )  # the hash, checked on a real server
    streams_before, _ = asyncio.run(_replication(_child_url(f, "a")))
    assert streams_before, "no R3 stream to watch"

    # c dies for good; once its lease is gone, list names it dead
    f.kill("c")
    wait_for("c's presence gone", lambda: _gone(f, "a", "c"), timeout=60)

    def listed_dead() -> subprocess.CompletedProcess[str] | None:
        p = _cli("list", url=f.nodes["a"].url)
        return p if p.returncode == 0 and "dead_member" in p.stdout else None

    out = wait_for("list names c dead", listed_dead, timeout=60)
    assert peer_id("c") in out.stdout, out.stdout
    dead = [
        x
        for x in wait_for("a view", lambda: _when(f, "a", bool), timeout=30)["findings"]
        if x["kind"] == "dead_member"
    ]
    assert [x["peer"] for x in dead] == [peer_id("c")]

    # bad removals are refused and change nothing
    with f.api("a") as c:
        missing = c.post("/fleet/broker/remove/c")
        assert missing.status_code == 400 and missing.json()["error"] == "confirm_required", missing.text
        wrong = c.post("/fleet/broker/remove/c", params={"confirm": "b"})
        assert wrong.status_code == 400 and wrong.json()["error"] == "confirm_required", wrong.text
        unknown = c.post("/fleet/broker/remove/zz", params={"confirm": "zz"})
        assert unknown.status_code == 409 and unknown.json()["error"] == "not_a_peer", unknown.text
        quorum = c.post("/fleet/broker/remove/b", params={"confirm": "b", "force": "true"}, timeout=60)
        assert quorum.status_code == 409 and quorum.json()["error"] == "no_leader", quorum.text
        assert "2 voters with 1 live" in quorum.json()["detail"]
    live = _cli("remove", "b", "--confirm", "b", url=f.nodes["b"].url)
    assert live.returncode == 2 and "node_live" in live.stdout, live.stdout + live.stderr
    assert sorted(_voters(_broker(f, "b"))) == ["a", "b", "c"]

    # the removal, through the CLI, leaves a 2-voter group with nothing to report
    removed = _cli("remove", "c", "--confirm", "c", url=f.nodes["a"].url)
    assert removed.returncode == 0, removed.stdout + removed.stderr
    assert "removed c" in removed.stdout
    after = wait_for(
        "2 voters", lambda: _when(f, "b", lambda v: sorted(_voters(v)) == ["a", "b"]), timeout=30
    )
    assert after["findings"] == []
    again = _cli("remove", "c", "--confirm", "c", url=f.nodes["a"].url)
    assert again.returncode == 2 and "not_a_peer" in again.stdout

    # a wiped replacement under a new id joins; the streams are R3 again and R3 creates work
    _start_replacement(f, "d", peers=("a", "b", "d"))
    joined = wait_for(
        "a, b, d current",
        lambda: _when(
            f,
            "a",
            lambda v: (
                sorted(_voters(v)) == ["a", "b", "d"] and all(p["current"] for p in v["group"]["peers"])
            ),
        ),
        timeout=60,
    )
    assert joined["findings"] == []

    def replicated() -> tuple[list[str], str] | None:
        healthy, created = asyncio.run(_replication(_child_url(f, "a")))
        names = {h.split("@")[0] for h in healthy}
        want = {h.split("@")[0] for h in streams_before}
        return (healthy, created) if want <= names and created == "created" else None

    healthy, _ = wait_for("streams R3 again", replicated, timeout=60, every=1.0)
    assert all("c" not in h.split("@")[1].split(",") for h in healthy)

    # a node that holds no group reads it from the members and has the removal carried by one
    f.kill("d")
    rows = wait_for("d's presence gone", lambda: _gone(f, "a", "d"), timeout=60)
    seen, done = asyncio.run(_from_outside(_child_url(f, "a"), rows, "d"))
    assert seen["group_from"] in ("a", "b") and sorted(_voters(seen)) == ["a", "b", "d"]
    assert done["node"] == "d" and done["peer"] == peer_id("d") and done["by"] in ("a", "b")
    assert sorted(p["name"] for p in done["group"]["peers"]) == ["a", "b"]
