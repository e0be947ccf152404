"""Three data nodes on a 3-member NATS cluster: the same write path as one node (ES-1, ES-10, ES-17, ES-36, ES-37).

Three real node processes (all roles) share a real 3-member nats-server cluster (``stream.type:
nats``, ``replicas: 3``). Checked: a write through one node is readable at once through another
(floors via ``min_position``) and on every node after its position; a retried write lands once
whichever node it is retried on; two concurrent ``if_match`` updates through two nodes: one wins,
one conflicts; a node killed with SIGKILL and restarted replays from its rows and ends with the same
rows as its peers (digests compared); with every data node gone, a read fails naming each node and a
knowledge search says it could not be searched.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import nats
import nats.js.errors
import pytest

from shared import coordination
from shared.estate import Call
from shared.router import EstateRouter, NobodyAnswered, decode_answer, encode_call, rpc_subject
from tests.support.cluster import NatsCluster
from tests.support.procs import REPO, TOKEN, Node, free_port, node_file

H = {"Authorization": f"Bearer {TOKEN}"}
COMPANY = REPO / "examples" / "company.yaml"


class Fleet:
    def __init__(self, root: Path, cluster: NatsCluster) -> None:
        self.root = root
        self.cluster = cluster
        self.nodes: dict[str, Node] = {}
        self.files: dict[str, Path] = {}

    def start(self, name: str) -> Node:
        d = self.root / name
        if name not in self.files:
            port = free_port()
            self.files[name] = node_file(
                d,
                node_id=name,
                port=port,
                stream={"type": "nats", "url": self.cluster.urls, "replicas": 3},
                coordination={"type": "embedded-kv"},
            )
        known = self.nodes.get(name)
        n = Node(
            ["node", "--node", str(self.files[name]), "--company", str(COMPANY)],
            dir=d,
            port=known.port if known is not None else _port_of(self.files[name]),
        )
        self.nodes[name] = n
        return n

    def api(self, name: str) -> httpx.Client:
        return httpx.Client(base_url=self.nodes[name].url, headers=H, timeout=30.0)

    def stop(self) -> None:
        for n in self.nodes.values():
            n.stop()


def _port_of(cfg: Path) -> int:
    import yaml

    return int(yaml.safe_load(cfg.read_text())["api"]["port"])


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("fleet")
    cluster = NatsCluster(root / "cluster")
    f = Fleet(root, cluster)
    try:
        for name in ("d1", "d2", "d3"):
            f.start(name)
        for n in f.nodes.values():
            n.wait_ready(90)
        yield f
    finally:
        f.stop()
        cluster.stop()


async def _ask(urls: str, node: str, op: str, args: dict[str, Any] | None = None) -> Any:
    nc = await nats.connect(servers=urls.split(","))
    try:
        msg = await nc.request(rpc_subject(node), encode_call(Call(op=op, args=args or {})), timeout=10)
        return decode_answer(msg.data)
    finally:
        await nc.close()


def _status(fleet: Fleet, node: str) -> dict[str, Any]:
    ans = asyncio.run(_ask(fleet.cluster.urls, node, "estate.status"))
    assert ans.status == "ran", ans
    return dict(ans.result)


def _digests_when_level(fleet: Fleet, names: list[str], timeout: float = 20.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while True:
        status = {n: _status(fleet, n) for n in names}
        positions = {
            n: tuple(s["domains"][d]["applied"] for d in ("tracker", "pages")) for n, s in status.items()
        }
        if len(set(positions.values())) == 1:
            out = {}
            for n in names:
                ans = asyncio.run(_ask(fleet.cluster.urls, n, "estate.digest"))
                out[n] = ans.result["digest"]["sha256"]
            return out
        if time.monotonic() > deadline:
            raise AssertionError(f"copies never reached one position: {positions}")
        time.sleep(0.2)


def test_a_write_through_one_node_is_read_through_another(fleet: Fleet) -> None:
    with fleet.api("d1") as a, fleet.api("d2") as b, fleet.api("d3") as c:
        made = a.post("/work", json={"project": "ENG", "title": "Written on d1"})
        assert made.status_code == 201, made.text
        key, token = made.json()["item"]["key"], made.json()["position_token"]
        got = b.get(f"/work/{key}", params={"min_position": token})
        assert got.status_code == 200 and got.json()["title"] == "Written on d1"
        for api in (a, b, c):
            assert api.get(f"/work/{key}", params={"min_position": token}).json()["key"] == key
        page = c.post(
            "/knowledge/pages",
            json={"space": "SUP", "title": "Fleet runbook", "body": "Rotate the quorum carefully"},
        ).json()
        hits = a.get(
            "/knowledge/search", params={"q": "quorum", "min_position": page["position_token"]}
        ).json()
        assert [h["title"] for h in hits["hits"]] == ["Fleet runbook"]


def test_the_logs_are_replicated_three_ways(fleet: Fleet) -> None:
    async def replicas() -> dict[str, tuple[int, float]]:
        nc = await nats.connect(servers=fleet.cluster.urls.split(","))
        try:
            js = nc.jetstream()
            out = {}
            for name in (
                "CREWLET_TRACKER_LOG",
                "CREWLET_PAGES_LOG",
                "CREWLET_TRACKER_VECTORS",
                "CREWLET_USAGE_LOG",
                "CREWLET_MEMORY",
            ):
                info = await js.stream_info(name)
                out[name] = (info.config.num_replicas or 0, info.config.duplicate_window or 0)
            return out
        finally:
            await nc.close()

    assert set(asyncio.run(replicas()).values()) == {(3, 120.0)}


def test_a_retried_write_lands_once_whichever_node_takes_it(fleet: Fleet) -> None:
    with fleet.api("d1") as a, fleet.api("d3") as c:
        first = a.post("/work", json={"project": "SUP", "title": "Retried across nodes"}).json()
        again = c.post(
            "/work", json={"project": "SUP", "title": "Retried across nodes", "op_id": first["op_id"]}
        )
        assert again.status_code == 201 and again.json()["item"]["key"] == first["item"]["key"]
        listed = c.get(
            "/work", params={"project": "SUP", "text": "Retried", "min_position": first["position_token"]}
        ).json()
        assert [i["key"] for i in listed["items"]] == [first["item"]["key"]]


def test_concurrent_if_match_updates_through_two_nodes(fleet: Fleet) -> None:
    with fleet.api("d1") as a, fleet.api("d2") as b:
        made = a.post("/work", json={"project": "ENG", "title": "Contended in the fleet"}).json()
        key = made["item"]["key"]
        assert b.get(f"/work/{key}", params={"min_position": made["position_token"]}).status_code == 200
        with ThreadPoolExecutor(2) as pool:
            futs = [
                pool.submit(api.patch, f"/work/{key}", json={"if_match": 1, "title": f"by {name}"})
                for api, name in ((a, "d1"), (b, "d2"))
            ]
            codes = sorted(f.result().status_code for f in futs)
            loser = next(f.result() for f in futs if f.result().status_code == 409)
        assert codes == [200, 409], codes
        assert loser.json()["detail"]["current_version"] == 2


def test_write_and_read_cost_on_three_replicas(fleet: Fleet) -> None:
    """Prints medians measured in one run beside a raw R3 publish (ratios are the result, not a limit)."""
    import statistics

    async def raw() -> list[float]:
        nc = await nats.connect(servers=fleet.cluster.urls.split(","))
        js = nc.jetstream()
        await js.add_stream(name="RAWR3", subjects=["rawr3.>"], num_replicas=3)
        deadline = (
            time.monotonic() + 20
        )  # a new R3 stream answers "no responders" until it has a leader (N14)
        while True:
            try:
                await js.publish("rawr3.warmup", b"x")
                break
            except nats.js.errors.NoStreamResponseError:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
        out = []
        for i in range(100):
            t = time.perf_counter()
            await js.publish(f"rawr3.{i}", b"x" * 300)
            out.append(time.perf_counter() - t)
        await nc.close()
        return out

    writes, local, remote = [], [], []
    with fleet.api("d1") as a, fleet.api("d2") as b:
        for i in range(100):
            t = time.perf_counter()
            r = a.post("/work", json={"project": "ENG", "title": f"r3 bench {i}"})
            writes.append(time.perf_counter() - t)
            key, token = r.json()["item"]["key"], r.json()["position_token"]
            t = time.perf_counter()
            assert a.get(f"/work/{key}").status_code == 200
            local.append(time.perf_counter() - t)
            t = time.perf_counter()
            assert b.get(f"/work/{key}", params={"min_position": token}).status_code == 200
            remote.append(time.perf_counter() - t)
    pub = asyncio.run(raw())
    ms = {
        k: round(statistics.median(v) * 1000, 3)
        for k, v in (
            ("raw_r3_publish", pub),
            ("rest_write", writes),
            ("rest_read_same_node", local),
            ("rest_read_other_node_at_position", remote),
        )
    }
    print(f"\nR3 fleet cost (median ms, n=100, same run): {ms}")
    assert all(v > 0 for v in ms.values())


def test_a_killed_node_replays_from_its_rows_and_matches_its_peers(fleet: Fleet) -> None:
    victim = fleet.nodes["d3"]
    victim.signal(9)
    victim.wait(10)
    with fleet.api("d1") as a:
        for i in range(20):
            assert (
                a.post("/work", json={"project": "ENG", "title": f"while d3 was down {i}"}).status_code == 201
            )
        assert (
            a.post(
                "/knowledge/pages",
                json={"space": "ENG", "title": "Written while d3 was down", "body": "replay me"},
            ).status_code
            == 200
        )
    victim.stop()
    restarted = fleet.start("d3")
    restarted.wait_ready(90)
    digests = _digests_when_level(fleet, ["d1", "d2", "d3"])
    assert len(set(digests.values())) == 1, digests
    with fleet.api("d3") as c:
        assert c.get("/work", params={"text": "while", "limit": 100}).json()["count"] == 20


def test_losing_the_log_leader_member_stops_nothing_for_long(fleet: Fleet) -> None:
    """Kill -9 the NATS member leading the tracker log: after the election the same op id lands once."""

    async def leader() -> str:
        nc = await nats.connect(servers=fleet.cluster.urls.split(","))
        try:
            info = await nc.jetstream().stream_info("CREWLET_TRACKER_LOG")
            return str(info.cluster.leader if info.cluster else "")
        finally:
            await nc.close()

    victim = asyncio.run(leader())
    assert victim in ("n1", "n2", "n3")
    fleet.cluster.kill(victim)
    try:
        with fleet.api("d1") as a:
            body: dict[str, Any] = {"project": "ENG", "title": "Written across an election"}
            deadline = time.monotonic() + 60
            while True:
                r = a.post("/work", json=body)
                if r.status_code == 201:
                    break
                assert r.status_code == 503, r.text  # no_quorum / unknown while the log elects a leader
                body["op_id"] = r.json()["detail"].get("op_id") or body.get("op_id")
                assert time.monotonic() < deadline, r.text
                time.sleep(0.5)
            token = r.json()["position_token"]
        for name in ("d2", "d3"):
            with fleet.api(name) as api:
                got = api.get("/work", params={"text": "election", "min_position": token})
                assert got.status_code == 200 and got.json()["count"] == 1, got.text
    finally:
        fleet.cluster.start(victim)
        fleet.cluster.wait_ready()
    digests = _digests_when_level(fleet, ["d1", "d2", "d3"], timeout=30)
    assert len(set(digests.values())) == 1, digests


def test_with_every_data_node_gone_nobody_answered_names_each(fleet: Fleet) -> None:
    for n in fleet.nodes.values():
        n.signal(9)
    for n in fleet.nodes.values():
        n.wait(10)

    async def ask() -> tuple[Exception | None, dict[str, Any]]:
        nc = await nats.connect(servers=fleet.cluster.urls.split(","))
        try:
            coord = await coordination.provision(
                nc.jetstream(timeout=5.0), replicas=3, lease_ttl=timedelta(seconds=45)
            )
            router = EstateRouter(nc, coord, node_id="outsider", read_wait=2.0)
            err: Exception | None = None
            try:
                await router.list_work_items(project="ENG")
            except NobodyAnswered as e:
                err = e
            search = await router.search_knowledge("quorum")
            return err, search
        finally:
            await nc.close()

    err, search = asyncio.run(ask())
    assert isinstance(err, NobodyAnswered), err
    assert sorted(r.node for r in err.replies) == ["d1", "d2", "d3"]
    assert all(r.said == "no_responders" for r in err.replies), err.replies
    assert "nobody answered for the tracker estate" in str(err)
    assert search["data"]["failed"] is True and search["data"]["hits"] == []
    assert "could not be searched" in search["data"]["sentence"]
