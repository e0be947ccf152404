"""Work items linked to an outside object: one item per basis (CO-24, CO-35, ES-7, ES-13, ES-16).

A create naming an ``external`` basis an item already has answers ``existing`` with that item. Two
creates of one basis racing through two data nodes both reach the log; the apply decides in log
order, so both copies hold one item (the later record files nothing and draws no number). Labels,
url and the ``reopened`` status round-trip; bad values are refused by field name; an estate file
written before these columns existed opens and gains them; ``GET /work?external=`` finds the item
through a real node; the tracker tools carry ``labels`` and ``external`` through.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared import estate, tools
from shared.coordination import MemoryCoordination
from shared.estate import Call
from shared.estate.store import upgrade
from shared.providers import ToolCall
from tests.support.procs import TOKEN
from tests.turns.workspace import Estate

from .conftest import Inproc, make_router, presence, seed, stop_inproc

Start = Callable[..., Awaitable[Inproc]]
BASIS = "github:186853002#1"


async def _create(node: Inproc, title: str, *, op_id: str = "", project: str = "ENG", **args: Any) -> Any:
    return await node.svc.serve(
        Call(op="work.create", args={"project": project, "title": title, **args}, op_id=op_id)
    )


async def _items(node: Inproc, **args: Any) -> list[dict[str, Any]]:
    ans = await node.svc.serve(Call(op="work.list", args=args))
    assert ans.error is None, ans
    items: list[dict[str, Any]] = ans.result["data"]["items"]
    return items


async def _next_number(node: Inproc, key: str = "ENG") -> int:
    ans = await node.svc.serve(Call(op="projects.list", args={}))
    return int(next(p for p in ans.result["data"] if p["key"] == key)["next_number"])


async def _log_last(node: Inproc) -> int:
    info = await node.nc.jetstream().stream_info("CREWLET_TRACKER_LOG")
    return int(info.state.last_seq)


async def test_a_second_create_of_one_basis_answers_the_existing_item(inproc: Start) -> None:
    a = await inproc("a")
    await seed(a, "ENG", "SUP")
    op = estate.mint_op_id("create-ENG")
    first = await _create(
        a,
        "Crash on empty config",
        op_id=op,
        external=BASIS,
        url="https://github.com/acme/lantern/issues/1",
        labels=["bug", "ui", "bug"],
    )
    assert first.error is None and first.result["outcome"] == "applied", first
    item = first.result["object"]
    assert item["key"] == "ENG-1" and item["external"] == BASIS
    assert item["url"] == "https://github.com/acme/lantern/issues/1" and item["labels"] == ["bug", "ui"]
    end = await _log_last(a)
    again = await _create(a, "Another title", external=BASIS, labels=["other"])
    assert again.error is None and again.result["outcome"] == "existing", again
    assert (
        again.result["object"]["key"] == "ENG-1"
        and again.result["object"]["title"] == "Crash on empty config"
    )
    assert again.result["object"]["labels"] == ["bug", "ui"]
    # Held here already: decided without a record; no number is drawn (CO-24 keys stay dense).
    assert await _log_last(a) == end and await _next_number(a) == 2
    elsewhere = await _create(a, "Filed under support", project="SUP", external=BASIS)
    assert elsewhere.result["outcome"] == "existing" and elsewhere.result["object"]["key"] == "ENG-1"
    assert [i["key"] for i in await _items(a, external=BASIS)] == ["ENG-1"]
    assert [i["key"] for i in await _items(a)] == ["ENG-1"]
    assert await _items(a, external="github:186853002#2") == []
    # A retried create is answered as the first landing (ES-7, ES-13).
    retry = await _create(a, "Crash on empty config", op_id=op, external=BASIS)
    assert retry.result["outcome"] == "applied" and retry.result["position"] == first.result["position"]
    got = await a.svc.serve(Call(op="work.get", args={"key": "ENG-1"}))
    assert got.result["data"]["external"] == BASIS and got.result["data"]["labels"] == ["bug", "ui"]
    assert got.result["data"]["history"][0]["fields"]["external"] == BASIS
    plain = await _create(a, "No link")
    assert plain.result["object"]["key"] == "ENG-2" and plain.result["object"]["external"] is None
    assert plain.result["object"]["labels"] == [] and plain.result["object"]["url"] is None


async def test_two_creates_of_one_basis_through_two_nodes_file_one_item(inproc: Start) -> None:
    a = await inproc("a")
    b = await inproc("b")
    await seed(a, "ENG")
    floor = await _log_last(a)
    assert await b.est.appliers["tracker"].wait_applied(floor, 30)
    # Hold both copies so neither can see the other's item when it decides: both records reach
    # the log and the apply alone must decide (a decide-time check could not).
    for n in (a, b):
        n.est.appliers["tracker"].pause()
    await asyncio.sleep(1.2)  # let the fetches in hand finish
    ops = {n.node_id: estate.mint_op_id(f"create-{n.node_id}") for n in (a, b)}
    calls = [
        asyncio.create_task(
            _create(n, f"From {n.node_id}", op_id=ops[n.node_id], external=BASIS, labels=[n.node_id])
        )
        for n in (a, b)
    ]
    for _ in range(200):
        if await _log_last(a) >= floor + 2:
            break
        await asyncio.sleep(0.02)
    assert await _log_last(a) == floor + 2, "both creates must be on the log before any applies"
    for n in (a, b):
        n.est.appliers["tracker"].resume()
    answers = await asyncio.gather(*calls)
    assert all(x.error is None for x in answers), answers
    outcomes = sorted(x.result["outcome"] for x in answers)
    assert outcomes == ["applied", "existing"], answers
    keys = {x.result["object"]["key"] for x in answers}
    assert keys == {"ENG-1"}
    winner = next(x for x in answers if x.result["outcome"] == "applied")
    loser = next(x for x in answers if x.result["outcome"] == "existing")
    assert winner.result["position"]["seq"] < loser.result["position"]["seq"]  # log order decides
    assert loser.result["object"]["title"] == winner.result["object"]["title"]
    for n in (a, b):
        assert await n.est.appliers["tracker"].wait_applied(floor + 2, 30)
        assert [i["key"] for i in await _items(n, external=BASIS)] == ["ENG-1"]
        assert len(await _items(n)) == 1
        assert await _next_number(n) == 2  # the folded create drew no number
    assert (await a.est.store.digest()) == (await b.est.store.digest())
    # A retry of the folded create, on either node, answers the same (from the ledger).
    loser_op = loser.result["op_id"]
    for n in (a, b):
        again = await _create(n, "retry", op_id=loser_op, external=BASIS)
        assert again.error is None and again.result["outcome"] == "existing", again
        assert again.result["object"]["key"] == "ENG-1"
        assert again.result["position"] == loser.result["position"]
    # Unpaused races through the router, several bases at once: still one item per basis.
    coord = MemoryCoordination()
    await presence(coord, "a", "b")
    routers = [make_router(a.nc, coord, "a", local=a), make_router(b.nc, coord, "b", local=b)]
    bases = [f"github:186853002#{n}" for n in range(2, 7)]
    made = await asyncio.gather(
        *(r.create_work_item("ENG", f"race {basis}", external=basis) for basis in bases for r in routers)
    )
    by_basis: dict[str, set[str]] = {}
    for ans in made:
        by_basis.setdefault(ans["object"]["external"], set()).add(ans["object"]["key"])
        assert ans["outcome"] in ("applied", "existing")
    assert all(len(keys) == 1 for keys in by_basis.values()) and set(by_basis) == set(bases)
    assert sum(1 for ans in made if ans["outcome"] == "applied") == len(bases)
    last = max(ans["position"]["seq"] for ans in made)
    for n in (a, b):
        assert await n.est.appliers["tracker"].wait_applied(last, 30)
        assert len(await _items(n, limit=100)) == 1 + len(bases)
        assert await _next_number(n) == 2 + len(bases)
    assert (await a.est.store.digest()) == (await b.est.store.digest())
    listed = await routers[1].list_work_items(external=bases[0], min_position=made[-1]["position_token"])
    assert [i["external"] for i in listed["data"]["items"]] == [bases[0]]


async def test_labels_url_and_reopened_round_trip(inproc: Start) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    coord = MemoryCoordination()
    await presence(coord, "a")
    r = make_router(a.nc, coord, "a", local=a)
    made = await r.create_work_item("ENG", "Flaky lantern", labels=["bug"])
    key = made["object"]["key"]
    up = await r.update_work_item(
        key, labels=["triage", "ui", "triage"], url="https://github.com/acme/lantern/pull/7", status="done"
    )
    assert up["object"]["labels"] == ["triage", "ui"] and up["object"]["url"].endswith("/pull/7")
    up = await r.update_work_item(key, status="reopened")
    assert up["object"]["status"] == "reopened" and up["object"]["status_group"] == "not_started"
    listed = await r.list_work_items(status_group="not_started")
    assert [i["key"] for i in listed["data"]["items"]] == [key]
    assert listed["data"]["items"][0]["labels"] == ["triage", "ui"]
    assert (await r.list_work_items(status="reopened"))["data"]["count"] == 1
    cat = await r.get_work_catalogue()
    assert {"status": "reopened", "group": "not_started"} in cat["data"]["statuses"]
    same = await r.update_work_item(key, labels=["triage", "ui"])  # unchanged: nothing written
    assert same["object"]["version"] == up["object"]["version"]
    cleared = await r.update_work_item(key, labels=[], url="")
    assert cleared["object"]["labels"] == [] and cleared["object"]["url"] is None
    got = (await r.get_work_item(key, read_level="linearizable"))["data"]
    changes = [h["fields"] for h in got["history"] if h["kind"] == "updated"]
    assert changes[0]["labels"] == [["bug"], ["triage", "ui"]]
    assert changes[-1]["labels"] == [["triage", "ui"], []]


@pytest.mark.parametrize(
    ("op", "args", "field"),
    [
        ("work.create", {"external": "github:1 #2"}, "external"),
        ("work.create", {"external": ""}, "external"),
        ("work.create", {"external": "g" * 201}, "external"),
        ("work.create", {"external": 12}, "external"),
        ("work.create", {"external": "github:1#2\x00"}, "external"),
        ("work.create", {"labels": "bug"}, "labels"),
        ("work.create", {"labels": [""]}, "labels"),
        ("work.create", {"labels": ["x" * 101]}, "labels"),
        ("work.create", {"labels": [f"l{i}" for i in range(51)]}, "labels"),
        ("work.create", {"labels": [3]}, "labels"),
        ("work.create", {"url": "ftp://example.com/x"}, "url"),
        ("work.create", {"url": "https://" + "x" * 2000}, "url"),
        ("work.create", {"url": "not a url"}, "url"),
        ("work.update", {"labels": ["ok", "bad\n"]}, "labels"),
        ("work.update", {"url": "javascript:alert(1)"}, "url"),
        ("work.update", {"status": "re-opened"}, "status"),
        ("work.update", {"due": "2026-02-30"}, "due"),  # the shape of a date, not a calendar date
        ("work.update", {"due": "2026-13-01"}, "due"),
        ("work.list", {"external": "has space"}, "external"),
    ],
)
async def test_bad_links_and_labels_are_refused_by_name(
    inproc: Start, op: str, args: dict[str, Any], field: str
) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    base: dict[str, Any] = {}
    if op == "work.create":
        base = {"project": "ENG", "title": "x"}
    elif op == "work.update":
        created = await _create(a, "target")
        base = {"key": created.result["object"]["key"]}
    ans = await a.svc.serve(Call(op=op, args={**base, **args}))
    assert ans.error is not None and ans.error["code"] == "invalid" and ans.error["field"] == field, ans


async def test_fifty_labels_after_dedupe_are_accepted(inproc: Start) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    labels = [f"l{i}" for i in range(50)] + ["l0", "l1"]
    ans = await _create(a, "many", labels=labels)
    assert ans.error is None and ans.result["object"]["labels"] == labels[:50]


def _strip_to_previous_version(db: Path) -> None:
    """Make ``db`` look as the previous build wrote it: no link columns, no index, no resolved_to."""
    with sqlite3.connect(db) as conn:
        conn.execute("DROP INDEX ux_tasks_external")
        for col in ("external", "url", "labels"):
            conn.execute(f"ALTER TABLE tasks DROP COLUMN {col}")
        conn.execute("ALTER TABLE statelog_ledger DROP COLUMN resolved_to")
        cols = {r[1] for r in conn.execute("PRAGMA table_info(tasks)")}
        assert not cols & {"external", "url", "labels"}


async def test_an_estate_file_from_the_previous_version_opens_and_gains_the_columns(
    inproc: Start, tmp_path: Path
) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    for i in range(3):
        await _create(a, f"old item {i}")
    await stop_inproc(a)
    db = tmp_path / "a" / "estate.db"
    _strip_to_previous_version(db)
    a = await inproc("a")  # opens the old file: the columns and the index are added
    with sqlite3.connect(db) as conn:
        cols = {r[1] for r in conn.execute("PRAGMA table_info(tasks)")}
        indexes = {r[1] for r in conn.execute("PRAGMA index_list(tasks)")}
        ledger_cols = {r[1] for r in conn.execute("PRAGMA table_info(statelog_ledger)")}
    assert {"external", "url", "labels"} <= cols and "ux_tasks_external" in indexes
    assert "resolved_to" in ledger_cols
    old = await _items(a)
    assert len(old) == 3 and all(i["labels"] == [] and i["external"] is None for i in old)
    made = await _create(a, "linked", external=BASIS)
    assert made.result["outcome"] == "applied" and made.result["object"]["key"] == "ENG-4"
    again = await _create(a, "linked again", external=BASIS)
    assert again.result["outcome"] == "existing"
    # A fresh copy replaying the whole log holds the same rows as the upgraded one (ES-1).
    b = await inproc("b")
    assert await b.est.appliers["tracker"].wait_applied(made.result["position"]["seq"], 30)
    assert (await a.est.store.digest()) == (await b.est.store.digest())
    # Opening again changes nothing (the upgrade is idempotent).
    await stop_inproc(a)
    store = await estate.EstateStore.open(db)
    try:
        assert await store.write(upgrade) == []
    finally:
        store.close()


def test_rest_links_an_item_and_finds_it_by_basis(start_node: Callable[..., Any], tmp_path: Path) -> None:
    node = start_node("run", "--data-dir", str(tmp_path / "d"))
    node.wait_ready()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    body = {
        "project": "ENG",
        "title": "Crash on empty config",
        "external": BASIS,
        "url": "https://github.com/acme/lantern/issues/1",
        "labels": ["bug"],
    }
    r = httpx.post(node.url + "/work", json=body, headers=auth)
    assert r.status_code == 201 and r.json()["outcome"] == "applied", r.text
    key = r.json()["item"]["key"]
    r = httpx.post(node.url + "/work", json={**body, "title": "Same issue again"}, headers=auth)
    assert r.status_code == 200 and r.json()["outcome"] == "existing", r.text
    assert r.json()["item"]["key"] == key and r.json()["item"]["title"] == "Crash on empty config"
    r = node.get("/work?external=github:186853002%231")
    assert r.status_code == 200 and [i["key"] for i in r.json()["items"]] == [key], r.text
    assert r.json()["items"][0]["url"] == body["url"] and r.json()["items"][0]["labels"] == ["bug"]
    r = httpx.patch(
        node.url + f"/work/{key}", json={"labels": ["bug", "p1"], "status": "reopened"}, headers=auth
    )
    assert r.status_code == 200 and r.json()["item"]["labels"] == ["bug", "p1"], r.text
    assert r.json()["item"]["status_group"] == "not_started"
    r = httpx.post(node.url + "/work", json={**body, "external": "has space"}, headers=auth)
    assert r.status_code == 400 and r.json()["detail"]["field"] == "external", r.text
    r = httpx.patch(node.url + f"/work/{key}", json={"labels": [""]}, headers=auth)
    assert r.status_code == 400 and r.json()["detail"]["field"] == "labels", r.text
    r = node.get("/work?external=github:186853002%239")
    assert r.status_code == 200 and r.json()["count"] == 0, r.text
    # a boolean is no version and no string is a boolean (a new user's if_match: true was version 1)
    for patch, field in (({"if_match": True, "title": "t"}, "if_match"), ({"watch": "yes"}, "watch")):
        r = httpx.patch(node.url + f"/work/{key}", json=patch, headers=auth)
        assert r.status_code == 400 and field in r.text, (patch, r.text)
    r = httpx.patch(node.url + f"/work/{key}", json={"due": "2026-02-29"}, headers=auth)
    assert r.status_code == 400 and r.json()["detail"]["field"] == "due", r.text
    r = httpx.patch(node.url + f"/work/{key}", json={"due": "2028-02-29"}, headers=auth)
    assert r.status_code == 200, r.text
    # a retention gesture names the keys it does not take (a misspelt force must not pass unforced)
    r = httpx.post(
        node.url + "/retention/evict", json={"node": "x", "confirm": "x", "forse": True}, headers=auth
    )
    assert r.status_code == 422 and "forse" in r.text, r.text


class _RouterTools:
    """The tracker half of a seat's workspace over the router, taking ``labels`` and ``external``."""

    def __init__(self, router: Any) -> None:
        self.r = router

    async def create_work_item(
        self,
        project: str,
        type: str,
        title: str,
        body: str,
        assignee: str | None,
        *,
        labels: list[str] | None = None,
        external: str | None = None,
    ) -> dict[str, Any]:
        res = await self.r.create_work_item(
            project, title, type=type, body=body, assignee=assignee, labels=labels, external=external
        )
        return {**res["object"], "outcome": res["outcome"]}

    async def update_work_item(
        self, key: str, *, labels: list[str] | None = None, **kw: Any
    ) -> dict[str, Any]:
        res = await self.r.update_work_item(key, labels=labels, **kw)
        return dict(res["object"])


async def test_the_tools_pass_labels_and_external_through(inproc: Start) -> None:
    a = await inproc("a")
    await seed(a, "ENG")
    coord = MemoryCoordination()
    await presence(coord, "a")
    ctx = tools.ToolContext("triage", _RouterTools(make_router(a.nc, coord, "a", local=a)))  # type: ignore[arg-type]
    surface = tools.builtin_tools()
    args = {"project": "ENG", "title": "From the hook", "labels": ["bug", "bug"], "external": BASIS}
    first = await surface.execute(ToolCall("c1", "create_work_item", args), ctx)
    assert not first.is_error and first.result["labels"] == ["bug"] and first.result["outcome"] == "applied"
    again = await surface.execute(ToolCall("c2", "create_work_item", {**args, "title": "Again"}), ctx)
    assert again.result["outcome"] == "existing" and again.result["key"] == first.result["key"]
    up = await surface.execute(
        ToolCall(
            "c3", "update_work_item", {"key": first.result["key"], "labels": ["p1"], "status": "reopened"}
        ),
        ctx,
    )
    assert not up.is_error and up.result["labels"] == ["p1"] and up.result["status"] == "reopened"
    too_many = await surface.execute(
        ToolCall("c4", "create_work_item", {"project": "ENG", "title": "x", "labels": ["l"] * 51}), ctx
    )
    assert too_many.is_error and too_many.error_code == "invalid_arguments"
    # A workspace that does not take them yet refuses them by name; every other call still works.
    old = tools.ToolContext("triage", Estate().workspace("triage"))
    refused = await surface.execute(ToolCall("c5", "create_work_item", {**args, "project": "SUP"}), old)
    assert refused.is_error and "labels" in (refused.error or "")
