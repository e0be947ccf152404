"""Issue 11 on a real fleet: snapshots, the trim past a stopped node, adoption, a fresh fourth node.

Real node processes (all roles) on a real 3-member nats-server cluster (``stream.type: nats``,
``replicas: 3``), booted together. Test timings (``CREWLET_RETENTION_TEST_TIMINGS=1``): a snapshot
every 2 s, ``min_age`` 6 s, a trim tick every 2 s, the eviction grace 2 s. The story, in order:

1. every node takes a snapshot and publishes it (``GET /estate``);
2. node ``c`` stops; writes go on; ``a`` takes a backup (the backup term now allows the trim);
   ``c`` is evicted (it would pin the log for ever otherwise: ES-47);
3. the ``worker:retention`` duty trims the tracker log past ``c``'s position (floor published
   first, never lowered);
4. ``c`` restarts: it is below its log, adopts a peer's snapshot (``statelog_adopted`` naming the
   donor and the artefact's sha256 the donor published), replays the tail and, readmitted, ends
   with rows identical to its peers' (digests);
5. a fresh fourth data node ``d`` joins the trimmed log and becomes a full copy.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import nats
import pytest
import yaml

from shared.estate import Call
from shared.router import decode_answer, encode_call, rpc_subject
from tests.support.cluster import NatsCluster
from tests.support.procs import REPO, TOKEN, Node, free_port, node_file

H = {"Authorization": f"Bearer {TOKEN}"}
COMPANY = REPO / "examples" / "company.yaml"
ENV = {"CREWLET_RETENTION_TEST_TIMINGS": "1"}
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, every: float = 0.5) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = probe()
        except (httpx.HTTPError, KeyError, TypeError) as e:
            last = e
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"{what} not seen in {timeout} s (last: {last!r})")


class Fleet:
    def __init__(self, root: Path, cluster: NatsCluster) -> None:
        self.root = root
        self.cluster = cluster
        self.nodes: dict[str, Node] = {}
        self.files: dict[str, Path] = {}
        self.procs: list[Node] = []

    def start(self, name: str) -> Node:
        d = self.root / name
        if name not in self.files:
            self.files[name] = node_file(
                d,
                node_id=name,
                port=free_port(),
                stream={
                    "type": "nats",
                    "url": self.cluster.urls,
                    "replicas": 3,
                    "tracker_retention": {"snapshot_interval": "2s", "min_age": "6s"},
                },
                coordination={"type": "embedded-kv", "lease_ttl_seconds": 3},
                retention={"trim_tick": "2s", "backup_max_age": "1h", "backup_owner": "the test"},
            )
        port = int(yaml.safe_load(self.files[name].read_text())["api"]["port"])
        runs = sum(1 for p in self.procs if p.url.endswith(f":{port}"))
        n = Node(
            ["node", "--node", str(self.files[name]), "--company", str(COMPANY)],
            dir=d / f"run{runs + 1}",
            port=port,
            env=ENV,
        )
        self.nodes[name] = n
        self.procs.append(n)
        return n

    def api(self, name: str) -> httpx.Client:
        return httpx.Client(base_url=self.nodes[name].url, headers=H, timeout=30.0)

    def estate(self, via: str = "a") -> dict[str, Any]:
        with self.api(via) as c:
            r = c.get("/estate")
            assert r.status_code == 200, r.text
            return dict(r.json())

    def row(self, node: str, domain: str = "tracker", via: str = "a") -> dict[str, Any] | None:
        for row in self.estate(via)["nodes"]:
            if row["node"] == node and row["domain"] == domain:
                return dict(row)
        return None

    def stop(self) -> None:
        for n in self.procs:
            n.stop()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("life")
    cluster = NatsCluster(root / "cluster")
    f = Fleet(root, cluster)
    try:
        for name in ("a", "b", "c"):  # booted together, as an orchestrator starts them
            f.start(name)
        for n in f.nodes.values():
            n.wait_ready(120)
        yield f
    finally:
        f.stop()
        cluster.stop()


async def _ask(urls: str, node: str, op: str) -> Any:
    nc = await nats.connect(servers=urls.split(","))
    try:
        msg = await nc.request(rpc_subject(node), encode_call(Call(op=op, args={})), timeout=10)
        return decode_answer(msg.data)
    finally:
        await nc.close()


def _digests_when_level(fleet: Fleet, names: list[str], timeout: float = 60.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    positions: dict[str, Any] = {}
    while time.monotonic() < deadline:
        try:
            status = {n: asyncio.run(_ask(fleet.cluster.urls, n, "estate.status")).result for n in names}
            positions = {
                n: tuple(s["domains"][d]["applied"] for d in ("tracker", "pages")) for n, s in status.items()
            }
            if len(set(positions.values())) == 1:
                return {
                    n: asyncio.run(_ask(fleet.cluster.urls, n, "estate.digest")).result["digest"]["sha256"]
                    for n in names
                }
        except (TypeError, KeyError, nats.errors.Error, TimeoutError) as e:
            positions = {"unanswered": repr(e)}  # a node still booting or adopting: ask again
        time.sleep(0.5)
    raise AssertionError(f"copies never reached one position: {positions}")


def _write(fleet: Fleet, via: str, n: int, tag: str) -> None:
    with fleet.api(via) as c:
        for i in range(n):
            r = c.post("/work", json={"project": "ENG", "title": f"{tag} {i}"})
            assert r.status_code == 201, r.text


@pytest.mark.timeout(
    300
)  # a three-node fleet booted, driven and drained in one item (setup and teardown count)
def test_the_estate_over_time(fleet: Fleet, tmp_path: Path) -> None:
    _write(fleet, "a", 30, "before")

    # 1. every node snapshots and publishes its artefact
    for node in ("a", "b", "c"):
        wait_for(f"{node}'s snapshot", lambda n=node: (fleet.row(n) or {}).get("snapshot"), 60)

    # 2. c stops; the fleet goes on; a backup; c is evicted
    c_seq = int(fleet.row("c")["seq"])  # type: ignore[index]
    fleet.nodes["c"].stop()
    _write(fleet, "a", 40, "while c was down")
    with fleet.api("a") as a:
        r = a.post("/backup", params={"dir": str(tmp_path / "backup")}, timeout=120)
        assert r.status_code == 201, r.text
        ev = wait_for(
            "c evicted",
            lambda: (lambda resp: resp.json() if resp.status_code == 200 else None)(
                a.post("/retention/evict", json={"node": "c", "confirm": "c"})
            ),
            30,
            every=1.0,
        )
    assert {x["outcome"] for x in ev["logs"]} == {"applied"}, ev
    assert set(fleet.estate()["evicted"]) == {"tracker", "pages"}  # c, on both counted logs
    assert all(set(n) == {"c"} for n in fleet.estate()["evicted"].values())

    # 3. the trim passes c's position (floor published, then the purge)
    floor = wait_for(
        "the tracker floor past c",
        lambda: (lambda f: f if f and int(f["floor"]) > c_seq + 1 else None)(
            fleet.estate()["floors"].get("tracker")
        ),
        120,
        every=1.0,
    )
    print(f"c stopped at {c_seq}; tracker floor {floor['floor']}; terms {floor['terms']}")
    # the purge follows the published floor on a later retention tick: c must come back below it
    wait_for(
        "the tracker log purged past c",
        lambda: (lambda first: first if first and int(first) > c_seq + 1 else None)(
            fleet.estate()["logs"]["tracker"]["first_seq"]
        ),
        120,
        every=1.0,
    )

    # 4. c comes back below its log: it adopts a peer's snapshot, then replays the tail
    c2 = fleet.start("c")
    adopted = wait_for(
        "statelog_adopted",
        lambda: [e for e in c2.events() if e.get("event") == "statelog_adopted"],
        120,
    )
    donor = adopted[0]["donor"]
    assert donor in ("a", "b"), adopted
    published = {
        row["snapshot"]["sha256"]
        for row in fleet.estate()["nodes"]
        if row["node"] == donor and row.get("snapshot")
    }
    print(f"c adopted {donor}'s artefact {adopted[0]['sha256'][:12]} (donor publishes {published})")
    with fleet.api("a") as a:
        back = wait_for(
            "c readmitted",
            lambda: (lambda r: r.json() if r.status_code == 200 else None)(
                a.post("/retention/readmit", json={"node": "c", "confirm": "c"})
            ),
            60,
            every=1.0,
        )
    assert {x["outcome"] for x in back["logs"]} == {"applied"}, back
    assert fleet.estate()["evicted"] == {}
    c2.wait_ready(120)
    _write(fleet, "b", 5, "after c came back")
    digests = _digests_when_level(fleet, ["a", "b", "c"])
    assert len(set(digests.values())) == 1, digests

    # 5. a fresh fourth data node joins the trimmed log and becomes a full copy
    d = fleet.start("d")
    d.wait_ready(180)
    assert [e for e in d.events() if e.get("event") == "statelog_adopted"], "d replayed a trimmed log?"
    digests = _digests_when_level(fleet, ["a", "b", "c", "d"])
    assert len(set(digests.values())) == 1, digests
    with fleet.api("d") as dd:
        listed = dd.get("/work", params={"text": "before", "limit": 100, "read_level": "stale"}).json()
        assert listed["count"] == 30, listed
