"""Divided knowledge search on a real fleet (ES-61..ES-64, FL-146; issue 12 "Divided search").

Three node processes (all roles) on a real 3-member nats-server cluster, booted together. 12 000
generated pages are published straight onto the pages log (the records a ``write_page`` decides,
in batches) and every node applies them. Then:

- before the pages, a search is answered whole by the node asked: no slice is scanned anywhere
  (ES-61);
- with 12 000 pages, each node scans only its own range (``crewlet_search_slices_total`` on each
  node's ``/metrics``): a 0..21, b 22..42, c 43..63, no overlap, union 0..63 (ES-62);
- for a fixed set of queries the divided answer, coordinated by any node, equals the undivided one
  (``search_pages`` over a node's whole ``estate.db``): same hits, same order, same scores (ES-63);
- a stopped peer (SIGSTOP) makes the answer ``partial`` naming it, with its 21 buckets missing
  and the partial sentence; a killed peer the same, never a 500 nor "nothing matched" (ES-64).

The pure assignment rule (ES-62: sorted ids, contiguous ranges, remainder first) is unit-tested
apart.
"""

from __future__ import annotations

import asyncio
import random
import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import nats
import pytest
import yaml
from sqlalchemy import create_engine

from shared import estate
from shared.estate import assign, merge_hits, slice_subject
from shared.estate.domains.pages import search_pages
from shared.router import decode_answer, encode_call, rpc_subject
from tests.support.cluster import NatsCluster
from tests.support.pages import publish_pages
from tests.support.procs import REPO, TOKEN, Node, free_port, node_file

H = {"Authorization": f"Bearer {TOKEN}"}
COMPANY = REPO / "examples" / "company.yaml"
PAGES = 12_000
T = TypeVar("T")

QUERIES: list[tuple[str, str | None]] = [
    ("lumen", None),  # one common word
    ("quorvex", None),  # one rare word
    ("lumen tavo", None),  # two common words, some pages hold them as a phrase
    ("ubuntu 20.04", None),  # text as typed beats the repeated token
    ("don't", None),
    ("multi-agent orchestration", None),
    ("sarin pelo dramu", None),  # three words
    ("kestrel harbour window", None),
    ("lumen", "SUP"),  # one space only
    ("nothingmatchesthisword", None),  # empty on both sides
]


# -- the assignment rule (pure) ------------------------------------------------------------------


def test_assignment_sorted_contiguous_remainder_first() -> None:
    assert assign(["c", "a", "b"]) == {"a": (0, 21), "b": (22, 42), "c": (43, 63)}
    assert assign(["n2", "n1"]) == {"n1": (0, 31), "n2": (32, 63)}
    assert assign(["solo"]) == {"solo": (0, 63)}
    five = assign(["e", "d", "c", "b", "a", "a"])
    assert [hi - lo + 1 for lo, hi in five.values()] == [13, 13, 13, 13, 12]
    for table in (assign(list("abc")), five, assign([f"n{i:02d}" for i in range(7)])):
        covered = [b for lo, hi in table.values() for b in range(lo, hi + 1)]
        assert covered == list(range(64))  # contiguous, no overlap, in sorted id order
    assert list(assign([f"n{i:03d}" for i in range(70)])) == [f"n{i:03d}" for i in range(64)]
    with pytest.raises(ValueError):
        assign([])
    assert slice_subject("node.1") == "crewlet.search.slice.node%2E1"  # one subject token


def test_merge_keeps_the_undivided_order() -> None:
    def hit(pid: str, cls: int, bm25: float) -> dict[str, Any]:
        return {"page_id": pid, "rank_class": cls, "bm25": bm25, "search_shard": 1, "score": -bm25}

    merged = merge_hits(
        [[hit("p3", 0, -1.0), hit("p1", 3, -9.0)], [hit("p2", 0, -1.0), hit("p4", 1, -5.0)]], 3
    )
    assert [h["page_id"] for h in merged] == ["p2", "p3", "p4"]  # class, then bm25, then id
    assert all(set(h) == {"page_id", "score"} for h in merged)


# -- the fleet -------------------------------------------------------------------------------------


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, every: float = 0.5) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            value = probe()
        except (httpx.HTTPError, KeyError, TypeError) as e:
            last = e
        else:
            if value:
                return value
            last = value
        time.sleep(every)
    raise AssertionError(f"{what} not seen in {timeout} s (last: {last!r})")


class Fleet:
    def __init__(self, root: Path, cluster: NatsCluster) -> None:
        self.root = root
        self.cluster = cluster
        self.nodes: dict[str, Node] = {}

    def start(self, name: str) -> Node:
        d = self.root / name
        port = free_port()
        f = node_file(
            d,
            node_id=name,
            port=port,
            stream={"type": "nats", "url": self.cluster.urls, "replicas": 3},
            coordination={"type": "embedded-kv", "lease_ttl_seconds": 30},
        )
        assert int(yaml.safe_load(f.read_text())["api"]["port"]) == port
        n = Node(["node", "--node", str(f), "--company", str(COMPANY)], dir=d / "run", port=port)
        self.nodes[name] = n
        return n

    def search(self, via: str, q: str, *, space: str | None = None, limit: int = 20) -> dict[str, Any]:
        params: dict[str, Any] = {"q": q, "limit": limit}
        if space:
            params["space"] = space
        r = httpx.get(self.nodes[via].url + "/knowledge/search", params=params, headers=H, timeout=30.0)
        assert r.status_code == 200, r.text
        return dict(r.json())

    def slices(self, name: str) -> set[tuple[int, int]]:
        text = self.nodes[name].get("/metrics").text
        found = re.findall(r"^crewlet_search_slices_total\{([^}]*)\} (\S+)$", text, re.M)
        out = set()
        for labels, value in found:
            kv = dict(re.findall(r'(\w+)="([^"]*)"', labels))
            if float(value) > 0:
                out.add((int(kv["lo"]), int(kv["hi"])))
        return out

    def stop(self) -> None:
        for n in self.nodes.values():
            n.stop()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    root = tmp_path_factory.mktemp("divided")
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


# -- the corpus ------------------------------------------------------------------------------------

_SYLLABLES = [
    "lu",
    "men",
    "ta",
    "vo",
    "sa",
    "rin",
    "pe",
    "lo",
    "dra",
    "mu",
    "ke",
    "stra",
    "no",
    "vi",
    "qua",
    "do",
]


def _vocabulary(rng: random.Random) -> list[str]:
    words = {"lumen", "tavo", "sarin", "pelo", "dramu", "kestrel", "harbour", "window"}
    while len(words) < 3000:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def _pages(n: int) -> list[tuple[str, str, str]]:
    """(space, title, body) of ``n`` generated pages, Zipf-like word frequencies, a few planted phrases."""
    rng = random.Random(12)
    vocab = _vocabulary(rng)
    weights = [1.0 / (i + 1) for i in range(len(vocab))]
    planted = [
        "ubuntu 20.04 is the base image",
        "build 20 on 04 then 20 20 20",
        "don't use passive voice",
        "don t t t",
        "multi-agent orchestration across seats",
        "agent agent agent multi",
        "lumen tavo",
        "quorvex",
    ]
    out = []
    for i in range(n):
        words = rng.choices(vocab, weights=weights, k=rng.randint(40, 120))
        if i % 37 == 0:
            words.insert(rng.randrange(len(words)), rng.choice(planted))
        title = " ".join(rng.choices(vocab, weights=weights, k=rng.randint(2, 5))) + f" {i}"
        out.append(("SUP" if i % 4 == 0 else "ENG", title, " ".join(words)))
    return out


async def _publish(urls: str, pages: list[tuple[str, str, str]]) -> int:
    """Publish the pages' records onto the pages log in batches; return the last sequence."""
    nc = await nats.connect(servers=urls.split(","))
    try:
        return await publish_pages(nc.jetstream(timeout=30.0), pages, writer="divided-test")
    finally:
        await nc.close()


async def _applied(urls: str, nodes: list[str]) -> dict[str, int]:
    nc = await nats.connect(servers=urls.split(","))
    try:
        out = {}
        for node in nodes:
            msg = await nc.request(
                rpc_subject(node), encode_call(estate.Call(op="estate.status")), timeout=10
            )
            out[node] = int(decode_answer(msg.data).result["domains"]["pages"]["applied"])
        return out
    finally:
        await nc.close()


def _undivided(
    db: Path, q: str, space: str | None, limit: int = 20, buckets: list[int] | None = None
) -> list[dict[str, Any]]:
    """The whole-index answer, straight from a node's estate file (the search as it was before ES-62);
    with ``buckets``, the same over that range only, in the public shape."""
    engine = create_engine(f"sqlite:///file:{db}?mode=ro&uri=true")
    try:
        with engine.connect() as conn:
            args: dict[str, Any] = {"query": q, "limit": limit}
            if space:
                args["space"] = space
            if buckets is None:
                return search_pages(conn, args)
            return merge_hits([search_pages(conn, {**args, "buckets": buckets})], limit)
    finally:
        engine.dispose()


# -- the story -------------------------------------------------------------------------------------


@pytest.mark.timeout(
    300
)  # a three-node fleet booted, driven and drained in one item (setup and teardown count)
def test_divided_search(fleet: Fleet) -> None:
    nodes = ["a", "b", "c"]

    # ES-61: a small corpus is searched whole by the node asked; nobody scans a slice
    small = fleet.search("a", "lumen")
    assert "divided" not in small and "partial" not in small, small
    assert all(fleet.slices(n) == set() for n in nodes)

    # 12 000 pages onto the pages log; every copy applies them
    head = asyncio.run(_publish(fleet.cluster.urls, _pages(PAGES)))
    wait_for(
        "every copy at the pages head",
        lambda: all(v >= head for v in asyncio.run(_applied(fleet.cluster.urls, nodes)).values()),
        120,
        every=1.0,
    )

    # ES-62: divided among the three, 22/21/21 by sorted id; each node scans only its range
    first = wait_for(
        "a divided answer", lambda: (lambda r: r if "divided" in r else None)(fleet.search("a", "lumen")), 30
    )
    table = {"a": [0, 21], "b": [22, 42], "c": [43, 63]}
    assert first["divided"]["assignment"] == table
    assert first["divided"]["scanned"] == table
    assert first["coverage"] == {"buckets_answered": 64, "buckets_missing": 0}
    assert "partial" not in first and first["state"] == "ok"
    for via in ("b", "c"):
        fleet.search(via, "lumen")
    scans = {n: fleet.slices(n) for n in nodes}
    assert scans == {n: {tuple(r)} for n, r in table.items()}, scans
    covered = sorted(b for n in nodes for lo, hi in scans[n] for b in range(lo, hi + 1))
    assert covered == list(range(64))  # union 0..63, no overlap

    # ES-63: the divided answer is the undivided one, whichever node coordinates
    db = fleet.root / "a" / "store" / "estate.db"
    for i, (q, space) in enumerate(QUERIES):
        whole = _undivided(db, q, space)
        via = nodes[i % 3]
        got = fleet.search(via, q, space=space)
        assert got["divided"]["coordinator"] == via
        assert got["coverage"]["buckets_missing"] == 0, got
        assert got["hits"] == whole, (q, space, via)
        if q != "nothingmatchesthisword":
            assert whole, f"{q!r} should match some generated page"
    planted = fleet.search("b", "ubuntu 20.04", limit=3)["hits"]
    assert "20.04" in planted[0]["snippet"], planted  # text as typed first, as undivided

    # ES-64: a peer that does not answer → partial, naming it, its 21 buckets missing
    fleet.nodes["c"].signal(signal.SIGSTOP)
    try:
        got = fleet.search("a", "lumen tavo")
    finally:
        fleet.nodes["c"].signal(signal.SIGCONT)
    assert got["partial"] == {
        "buckets_answered": 43,
        "buckets_missing": 21,
        "absent_nodes": ["c"],
        "semantic_skipped": False,
    }, got
    assert got["state"] == "partial" and got["hits"], got
    assert "21 of the 64 search slices were not searched" in got["sentence"], got["sentence"]
    assert "Search again, or ask a colleague" in got["sentence"]
    assert "Nothing in the knowledge base matched" not in got["sentence"]
    # what the two answering nodes hold, best first: the undivided order over buckets 0..42
    assert got["hits"] == _undivided(db, "lumen tavo", None, buckets=[0, 42])
    whole = _undivided(db, "lumen tavo", None)

    # the peer is back: whole again
    back = wait_for(
        "a whole answer again",
        lambda: (lambda r: r if r["coverage"]["buckets_missing"] == 0 else None)(
            fleet.search("a", "lumen tavo")
        ),
        30,
    )
    assert back["hits"] == whole

    # a peer killed outright: partial at once (nothing listens on its subject), never a 500
    fleet.nodes["b"].signal(signal.SIGKILL)
    fleet.nodes["b"].wait(10)
    dead = fleet.search("c", "nothingmatchesthisword")
    assert dead["partial"]["absent_nodes"] == ["b"] and dead["partial"]["buckets_missing"] == 21, dead
    assert dead["state"] == "partial" and not dead["failed"], dead
    assert "Nothing in the knowledge base matched" not in dead["sentence"], dead["sentence"]
    assert "21 of the 64 search slices were not searched" in dead["sentence"]
