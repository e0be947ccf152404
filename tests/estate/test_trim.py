"""The trim (ES-47, ES-48, ES-49) and the write fence against its floor (ES-50).

The table test feeds term values to the pure conclusion. The in-process tests run on a real
nats-server: a coordination store provisioned on it (``crewlet_*`` buckets, where the position
heartbeat also writes), data nodes in-process, and the retention tick called directly with a
``now`` past ``min_age`` (rather than waiting it out).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import nats
import pytest

from services.workers.retention import Retention, RetentionSettings, publish_floor, purge_below
from shared import estate
from shared.coordination import MemoryCoordination, NatsCoordination, provision
from shared.estate import STREAMS, TERMS, InvalidField, conclude
from shared.leases import DUTY_TTLS
from tests.support.procs import REPO, Node, free_port, node_file

from .conftest import Inproc, make_router, presence, seed

Start = Callable[..., Awaitable[Inproc]]

_ALL = dict.fromkeys(TERMS, "n/a")


def _terms(**kw: Any) -> dict[str, Any]:
    return {**_ALL, **kw}


TABLE: list[tuple[str, dict[str, Any], int, list[str]]] = [
    (
        "the lowest int term wins",
        _terms(applied=90, min_hold="unbounded", backup_floor=70, snapshot_floor=80, age_floor=95),
        70,
        [],
    ),
    ("a hold lowers it", _terms(applied=90, min_hold=40, backup_floor=70, age_floor=95), 40, []),
    ("a young log trims nothing, unblocked", _terms(applied=90, backup_floor=70, age_floor=0), 0, []),
    ("no backup blocks", _terms(applied=90, backup_floor=0, age_floor=95), 0, ["backup_floor"]),
    (
        "an unreadable term blocks",
        _terms(applied=90, min_hold="unreadable", backup_floor=70, age_floor=95),
        0,
        ["min_hold"],
    ),
    (
        "every blocking term is named",
        _terms(applied="unreadable", backup_floor=0, age_floor=95),
        0,
        ["applied", "backup_floor"],
    ),
    (
        "n/a and unbounded bind nothing",
        _terms(applied=12, min_hold="unbounded", backup_floor=30, age_floor=50),
        12,
        [],
    ),
    ("nothing bounds it: nothing goes", _terms(min_hold="unbounded"), 0, []),
]


@pytest.mark.parametrize(("case", "terms", "point", "blocked_by"), TABLE, ids=[t[0] for t in TABLE])
def test_the_trim_point_is_the_minimum_of_the_terms(
    case: str, terms: dict[str, Any], point: int, blocked_by: list[str]
) -> None:
    got = conclude(terms)
    assert (got.point, got.blocked_by) == (point, blocked_by), case
    assert got.terms == terms


def test_a_missing_or_bad_term_is_refused_by_name() -> None:
    bad = _terms(applied=-1)
    with pytest.raises(InvalidField) as e:
        conclude(bad)
    assert e.value.field == "terms.applied"
    missing = {k: v for k, v in _terms(applied=1).items() if k != "age_floor"}
    with pytest.raises(InvalidField) as e:
        conclude(missing)
    assert e.value.field == "terms.age_floor"


def test_the_retention_duty_has_its_ttl() -> None:
    assert DUTY_TTLS["retention"] == timedelta(minutes=45)


@pytest.fixture
async def coord(nats_server: Any) -> AsyncIterator[tuple[NatsCoordination, Any]]:
    nc = await nats.connect(nats_server.url, name="coordination")
    try:
        yield await provision(nc.jetstream(timeout=5.0), lease_ttl=timedelta(seconds=45)), nc
    finally:
        await nc.close()


async def _create(node: Inproc, title: str) -> dict[str, Any]:
    ans = await node.svc.serve(estate.Call(op="work.create", args={"project": "ENG", "title": title}))
    assert ans.status == "ran" and ans.error is None, ans
    return ans.result


async def _announce(c: NatsCoordination, node: str, tracker: int, pages: int) -> None:
    row = {
        "node": node,
        "taken_at": int(time.time() * 1_000_000),
        "dir": "/backups",
        "owner": "ops",
        "verified": True,
        "positions": {
            "tracker": {"stream": STREAMS["tracker"], "generation": 1, "seq": tracker},
            "pages": {"stream": STREAMS["pages"], "generation": 1, "seq": pages},
        },
    }
    await c.put("backups", node, json.dumps(row).encode())


async def _floor(c: NatsCoordination, domain: str) -> dict[str, Any]:
    entry = await c.get("trim_floors", domain)
    assert entry is not None
    return json.loads(entry.value)


async def test_a_tick_publishes_the_floor_then_trims_and_the_floor_never_goes_down(
    inproc: Start, coord: tuple[NatsCoordination, Any]
) -> None:
    c, nc = coord
    a = await inproc("a", heartbeat=3600.0)
    await seed(a, "ENG")
    for i in range(8):
        await _create(a, f"task {i}")
    await a.est.beat.beat()  # the positions row says where "a" is now
    _first, last = await a.est.log.head("tracker")
    _pfirst, plast = await a.est.log.head("pages")
    assert a.est.appliers["tracker"].applied == last
    ret = Retention(
        c, nc.jetstream(timeout=5.0), node_id="w", settings=RetentionSettings("engine", 86_400.0, 60.0)
    )
    later = int(time.time() * 1_000_000) + 3_600 * 1_000_000  # past min_age: every record is old

    # 1. a verified backup reaching last-3: the floor is published at last-3, then the log trimmed
    await _announce(c, "a", last - 3, plast)
    out = await ret.tick(now_us=later)
    t = out["tracker"]
    assert t["published"] and t["blocked_by"] == [] and (t["floor"], t["trim_to"]) == (last - 3, last - 3)
    assert t["purged"] == last - 3
    assert t["terms"] == {
        "applied": last,
        "min_hold": "unbounded",
        "backup_floor": last - 3,
        "snapshot_floor": "n/a",  # a counted set of one node
        "feed_ack_floor": "n/a",
        "age_floor": last,
    }
    rec = await _floor(c, "tracker")
    assert (rec["floor"], rec["trim_to"], rec["blocked_by"], rec["by"]) == (last - 3, last - 3, [], "w")
    assert rec["first_seq"] == last - 2 and rec["generation"] == 1 and rec["stream"] == STREAMS["tracker"]
    assert (await a.est.log.head("tracker"))[0] == last - 2
    assert out["pages"]["floor"] == plast and "trim_blocked" not in ret.alarms.active

    # 2. a lower conclusion (an older backup, a live hold) keeps the floor where it was
    await _announce(c, "a", last - 5, plast)
    await c.put("trim_holds", "tracker.join-b", json.dumps({"domain": "tracker", "seq": last - 6}).encode())
    out = await ret.tick(now_us=later)
    t = out["tracker"]
    assert (t["floor"], t["trim_to"], t["purged"]) == (last - 3, last - 6, 0)
    assert t["terms"]["min_hold"] == last - 6
    assert (await _floor(c, "tracker"))["floor"] == last - 3
    assert (await a.est.log.head("tracker"))[0] == last - 2
    await c.delete("trim_holds", "tracker.join-b")

    # 3. no backup: blocked by backup_floor, nothing deleted, the floor kept, trim_blocked raised
    await _create(a, "one more")
    await a.est.beat.beat()
    await c.delete("backups", "a")
    out = await ret.tick(now_us=later)
    t = out["tracker"]
    assert t["blocked_by"] == ["backup_floor"] and t["terms"]["backup_floor"] == 0
    assert (t["floor"], t["trim_to"], t["purged"]) == (last - 3, 0, 0)
    rec = await _floor(c, "tracker")
    assert (rec["floor"], rec["trim_to"], rec["blocked_by"]) == (last - 3, 0, ["backup_floor"])
    assert (await a.est.log.head("tracker"))[0] == last - 2
    assert "trim_blocked" in ret.alarms.active
    # a backup again: the next tick advances and the alarm clears
    await _announce(c, "a", last + 1, plast)
    out = await ret.tick(now_us=later)
    assert out["tracker"]["floor"] == last + 1 and "trim_blocked" not in ret.alarms.active


async def test_a_second_counted_node_without_a_snapshot_pins_the_trim(
    inproc: Start, coord: tuple[NatsCoordination, Any]
) -> None:
    c, nc = coord
    a = await inproc("a", heartbeat=3600.0)
    await seed(a, "ENG")
    await a.est.beat.beat()
    _f, last = await a.est.log.head("tracker")
    await _announce(c, "a", last, last)
    await presence(c, "b")  # type: ignore[arg-type] # a live data node with no row yet counts at 0
    ret = Retention(
        c, nc.jetstream(timeout=5.0), node_id="w", settings=RetentionSettings("engine", 86_400.0, 60.0)
    )
    t = (await ret.tick(now_us=int(time.time() * 1_000_000) + 3_600_000_000))["tracker"]
    assert t["terms"]["applied"] == 0 and t["terms"]["snapshot_floor"] == 0
    assert (t["trim_to"], t["purged"], t["blocked_by"]) == (0, 0, [])

    # evicted past its grace (the gates say so), it stops counting and the trim advances (ES-47)
    async def evicted(domain: str, now_us: int) -> list[str]:
        return ["b"]

    ret.evicted = evicted
    t = (await ret.tick(now_us=int(time.time() * 1_000_000) + 3_600_000_000))["tracker"]
    assert t["terms"]["applied"] == last and t["terms"]["snapshot_floor"] == "n/a"
    assert (t["trim_to"], t["purged"]) == (last, last)


async def test_a_node_whose_next_record_was_trimmed_refuses_and_a_peer_takes_the_write(
    inproc: Start, coord: tuple[NatsCoordination, Any]
) -> None:
    c, nc = coord
    a = await inproc("a")
    b = await inproc("b", heartbeat=3600.0)
    await seed(a, "ENG")
    _f, seeded = await a.est.log.head("tracker")
    assert await b.est.appliers["tracker"].wait_applied(seeded, 30)
    await b.est.appliers["tracker"].stop()  # b stays at `seeded` while the log moves on
    b.svc.coord = c
    for i in range(4):
        await _create(a, f"task {i}")
    _f, last = await a.est.log.head("tracker")
    point = last - 1
    assert point > seeded + 1
    conclusion = conclude(dict.fromkeys(TERMS, point))

    # the floor is published, nothing deleted yet: replay could still close it → behind (retry here)
    pub = await publish_floor(c, "tracker", conclusion, first_seq=1, by="test")
    assert pub.published and pub.floor == point
    ans = await b.svc.serve(estate.Call(op="work.create", args={"project": "ENG", "title": "on b"}))
    assert (ans.status, ans.reason) == ("ran_nothing", "behind")

    # then the records are gone: only a snapshot can close it → below_floor, for writes and reads
    assert await purge_below(nc.jetstream(timeout=5.0), "tracker", point) == point
    ans = await b.svc.serve(estate.Call(op="work.create", args={"project": "ENG", "title": "on b"}))
    assert (ans.status, ans.reason) == ("ran_nothing", "below_floor")
    assert "only a snapshot" in (ans.detail or "")
    read = await b.svc.serve(estate.Call(op="work.list", args={"project": "ENG"}, read_level="stale"))
    assert (read.status, read.reason) == ("ran_nothing", "below_floor")

    # the router moves on: a peer takes the write (ES-34, ES-50)
    mem = MemoryCoordination()
    await presence(mem, "a", "b")
    router = make_router(b.nc, mem, "b", local=b)
    made = await router.create_work_item("ENG", "lands on a")
    assert made["outcome"] in ("applied", "pending")
    assert router.last_answered == "a"
    assert made["position"]["seq"] == last + 1


def test_a_node_runs_the_retention_duty_and_its_ledger_sweep(tmp_path: Any, nats_server: Any) -> None:
    """A real node process (all roles): the ``worker:retention`` tick publishes each log's floor at
    start, blocked by ``backup_floor`` in a fleet with no backup (ES-49), and the data role's sweep
    records the ledger watermark."""
    d = tmp_path / "n1"
    d.mkdir()
    port = free_port()
    cfg = node_file(
        d,
        node_id="n1",
        port=port,
        stream={"type": "nats", "url": nats_server.url},
        coordination={"type": "embedded-kv"},
    )
    n = Node(
        ["node", "--node", str(cfg), "--company", str(REPO / "examples" / "company.yaml")], dir=d, port=port
    )
    try:
        n.wait_ready(60)

        async def floors() -> dict[str, Any]:
            nc = await nats.connect(nats_server.url)
            try:
                c = await provision(nc.jetstream(timeout=5.0), lease_ttl=timedelta(seconds=45))
                for _ in range(100):
                    got = {dom: await c.get("trim_floors", dom) for dom in ("tracker", "pages")}
                    if all(got.values()):
                        return {dom: json.loads(e.value) for dom, e in got.items() if e is not None}
                    await asyncio.sleep(0.2)
                return {}
            finally:
                await nc.close()

        got = asyncio.run(floors())
        assert set(got) == {"tracker", "pages"}
        for rec in got.values():
            # the first tick may run before the data role made the logs (age_floor unreadable then)
            assert "backup_floor" in rec["blocked_by"] and rec["trim_to"] == 0 and rec["by"] == "n1"
        events = n.events()
        assert not [e for e in events if e.get("event") == "duty_tick_failed"]
        assert any(e.get("event") == "alarm_started" and e.get("kind") == "trim_blocked" for e in events)
    finally:
        n.stop()
    with sqlite3.connect(d / "store" / "estate.db") as db:
        rows = db.execute("SELECT domain, reason FROM statelog_ledger_watermark ORDER BY domain").fetchall()
    assert rows == sorted((d, "sweep") for d in estate.DOMAINS)  # every registered log's ledger
