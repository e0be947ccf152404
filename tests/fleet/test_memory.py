"""A seat's memory on real processes (AG-7, AG-8, AG-9; FL-71's accept): it follows the seat.

One fleet for the module: a 3-member nats-server cluster, data nodes ``a``, ``b``, ``c`` (every
role) booted first, a data node ``d`` and a ``[seats]`` satellite ``s`` booted only after ``a`` is
killed. Three extra seats are placed by labels so the test knows where they can run: ``keeper-s``
on ``a`` or ``s``, ``keeper-d`` on ``a`` or ``d``, ``keeper-f`` on ``a``, ``s`` or ``d``; ``recaller``
on a data node (its entries are written by the test, not by its holder: a satellite's scratch
cache sees only its own writes after hydration), with the scripted model as its auxiliary model.

- AG-7 / FL-71: three diary entries each for ``keeper-s`` and ``keeper-d`` while ``a`` holds them;
  ``kill -9 a``; the satellite ``s`` (with the ``memory_hydrate`` fault hook on ``keeper-f``) takes
  ``keeper-s`` (``memory_hydrated rows=3``) and refuses ``keeper-f`` (``memory_hydration_failed
  reason=fault``); then ``d`` boots and takes ``keeper-d`` (rows=3) and ``keeper-f``. Each keeper's
  first prompt on its new holder lists all three entries.
- AG-8: three entries for ``recaller``, the scripted filter picks entry 2: the prompt's
  ``personal_memory`` holds only entry 2, byte-identical in both executor iterations of a turn the
  reviewer sends back once (``self_iterate``); entry 2's ``retrieval_count`` is 1 in every data
  node's estate file; a tracker wake records ``trigger_requires_recon: true`` and no filter call.
- AG-9: every ingress returns the same entries; a ``state:read`` token is 403; a human handle 404.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sqlite3
import time
from collections.abc import Iterator
from typing import Any

import nats
import pytest
import yaml

from shared.estate.log import StateLog
from shared.memory import MemoryWriter, Outbox, diary_id
from tests.fleet.harness import Fleet, wait_for
from tests.support.procs import REPO

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(420)]  # four nodes boot in three steps, one is killed

HOOKS = REPO / "tests" / "support" / "fault_hooks"
READER = "reader-token-5c1e9a0b7d-4f2a81c6"
ROLES = [
    {"name": "Keeper S", "handle": "keeper-s", "goal": "Remember", "placement": {"labels": {"mem_s": "yes"}}},
    {"name": "Keeper D", "handle": "keeper-d", "goal": "Remember", "placement": {"labels": {"mem_d": "yes"}}},
    {"name": "Keeper F", "handle": "keeper-f", "goal": "Remember", "placement": {"labels": {"mem_f": "yes"}}},
    {
        "name": "Recaller",
        "handle": "recaller",
        "goal": "Recall",
        "llm": {"default": "default", "auxiliary": "default"},
        "placement": {"labels": {"mem_r": "yes"}},
    },
]
LABELS = {
    "a": {"mem_s": "yes", "mem_d": "yes", "mem_f": "yes"},
    "s": {"mem_s": "yes", "mem_f": "yes"},
    "b": {"mem_r": "yes"},
    "c": {"mem_r": "yes"},
    "d": {"mem_d": "yes", "mem_f": "yes", "mem_r": "yes"},
}


def _relabel(fleet: Fleet) -> None:
    """Each node's labels (:data:`LABELS`) and a second, ``state:read``-only token."""
    for name, path in fleet.files.items():
        doc = yaml.safe_load(path.read_text())
        doc["node"]["labels"] = LABELS.get(name, {})
        doc["api"]["auth"]["tokens"].append({"id": "reader", "token": READER, "grants": ["state:read"]})
        path.write_text(yaml.safe_dump(doc))


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    f = Fleet(tmp_path_factory.mktemp("memory"), names=("a", "b", "c", "d"), satellites=("s",))
    try:
        doc = yaml.safe_load(f.company.read_text())
        next(u for u in doc["units"] if u["id"] == "support")["roles"] += ROLES
        f.company.write_text(yaml.safe_dump(doc))
        f.seats = (*f.seats, *(r["handle"] for r in ROLES))
        _relabel(f)
        f.env["s"] = {"PYTHONPATH": str(HOOKS), "CREWLET_FAULT_HOOKS": "memory_hydrate:keeper-f"}
        f.boot(("a", "b", "c"), timeout=120)
        yield f
    finally:
        f.stop()


def _write(fleet: Fleet, handle: str, texts: list[str]) -> None:
    """Create ``handle``'s diary entries with a memory writer of the test's own (AG-2's path)."""

    async def run() -> None:
        assert fleet.cluster is not None
        nc = await nats.connect(servers=[m.url for m in fleet.cluster.members], connect_timeout=5)
        try:
            box = Outbox(fleet.root / f"outbox-{handle}.db")
            writer = MemoryWriter(
                StateLog(nc.jetstream(timeout=10.0), replicas=3), node_id="test", outbox=box
            )
            for i, text in enumerate(texts):
                row_id = diary_id(f"agent-{handle}", text)
                row = {"id": row_id, "kind": "diary_long", "content": text, "retrieval_count": 0,
                       "last_retrieved_at": None, "created_at": time.time() + i}  # fmt: skip
                assert (await writer.create(handle, "agent_diary", (row_id,), row)).status == "written"
            box.close()
        finally:
            await nc.close()

    asyncio.run(run())


def _hydrated(fleet: Fleet, node: str, seat: str, event: str = "memory_hydrated") -> dict[str, Any] | None:
    found = [e for e in fleet.events(node, event) if e.get("seat") == seat]
    return found[-1] if found else None


def _section(text: str, title: str = "Personal memory") -> str:
    found = re.search(rf"## {title}\n\n(.*?)\n\n(?=## |\Z)", text, re.S)
    return found.group(1) if found else ""


def _first_prompt(fleet: Fleet, seat: str, via: str, text: str) -> str:
    before = len(fleet.llm.requests(seat))
    fleet.post_message(seat, text, via=via)
    return fleet.llm.wait_first_round(seat, before, timeout=60).text


ENTRIES = {
    seat: [
        f"{seat} fact {n}: the {word} deploy needs Bo's sign-off"
        for n, word in enumerate(("red", "green", "blue"), 1)
    ]
    for seat in ("keeper-s", "keeper-d")
}


def test_memory_follows_the_seat_to_a_satellite_and_a_data_node(fleet: Fleet) -> None:
    wait_for("a holds the keepers", lambda: {"keeper-s", "keeper-d", "keeper-f"} <= set(fleet.held().get("a", [])),
             timeout=60)  # fmt: skip
    for seat, texts in ENTRIES.items():
        _write(fleet, seat, texts)
    fleet.nodes["a"].signal(9)  # kill -9: no drain, no release
    fleet.nodes["a"].popen.wait(10)

    fleet.boot(("s",), timeout=120)
    on_s = wait_for("s hydrates keeper-s", lambda: _hydrated(fleet, "s", "keeper-s"), timeout=60)
    assert on_s["rows"] == 3 and on_s["elapsed_ms"] < 15_000
    refused = wait_for("s refuses keeper-f", lambda: _hydrated(fleet, "s", "keeper-f", "memory_hydration_failed"),
                       timeout=60)  # fmt: skip
    assert refused["reason"] == "fault"
    assert _hydrated(fleet, "s", "keeper-f") is None
    prompt = _first_prompt(fleet, "keeper-s", "b", "What do you know about the deploys?")
    assert all(t in _section(prompt) for t in ENTRIES["keeper-s"]), prompt

    fleet.boot(("d",), timeout=120)
    on_d = wait_for("d hydrates keeper-d", lambda: _hydrated(fleet, "d", "keeper-d"), timeout=60)
    assert on_d["rows"] == 3
    wait_for("d takes keeper-f", lambda: _hydrated(fleet, "d", "keeper-f"), timeout=60)
    assert "keeper-f" in wait_for("d holds keeper-f", lambda: fleet.held().get("d"), timeout=30)
    prompt = _first_prompt(fleet, "keeper-d", "c", "What do you know about the deploys?")
    assert all(t in _section(prompt) for t in ENTRIES["keeper-d"]), prompt


def _estate_rows(fleet: Fleet, node: str, handle: str) -> list[dict[str, Any]]:
    path = fleet.root / node / "store" / "estate.db"
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        return [
            json.loads(r[0]) for r in db.execute("SELECT row FROM memory_rows WHERE handle = ?", (handle,))
        ]


def _summaries(fleet: Fleet, seat: str) -> list[dict[str, Any]]:
    return [
        e
        for node in fleet.procs.values()
        for e in node.events()
        if e.get("event") == "prefetch_summary" and e.get("seat") == seat
    ]


def test_recall_filters_freezes_and_stamps(fleet: Fleet) -> None:
    texts = ["Entry one: Ana prefers terse answers about billing.",
             "Entry two: the billing export runs at 02:00 UTC.",
             "Entry three: Carl owns the billing dashboards."]  # fmt: skip
    _write(fleet, "recaller", texts)

    def pick_two(listing: str) -> str:
        return next(line.split(".")[0] for line in listing.splitlines() if "Entry two" in line)

    fleet.llm.memory_filter = pick_two
    fleet.llm.reviews["recaller"] = ["self_iterate", "done"]
    before = len(fleet.llm.requests("recaller"))
    filters = len(fleet.llm.filter_requests)
    fleet.post_message("recaller", "When does the billing export run?", via="b")
    wait_for("two executor iterations",
             lambda: len([r for r in fleet.llm.requests("recaller")[before:] if "## Prior work" in r.text]) >= 1,
             timeout=60)  # fmt: skip
    seen = fleet.llm.requests("recaller")[before:]
    first = next(r.text for r in seen if r.first_round)
    later = next(r.text for r in seen if "## Prior work" in r.text)
    assert _section(first) == "- " + texts[1], (first, _summaries(fleet, "recaller"))
    assert _section(later) == _section(first)
    assert later.startswith(first)  # the first user message, memory included, byte for byte
    assert len(fleet.llm.filter_requests) == filters + 1

    def stamped() -> bool:
        for node in ("b", "c", "d"):
            rows = {r["content"]: r for r in _estate_rows(fleet, node, "recaller")}
            if rows.get(texts[1], {}).get("retrieval_count") != 1:
                return False
            assert rows[texts[0]]["retrieval_count"] == rows[texts[2]]["retrieval_count"] == 0
        return True

    wait_for("entry 2 stamped on every data node", stamped, timeout=30)

    # a tracker wake is thin: recency only, no filter call, a hint to look again
    filters = len(fleet.llm.filter_requests)
    with fleet.api("b") as c:
        r = c.post("/work", json={"project": "SUP", "title": "Look at this", "assignee": "recaller"})
    assert r.status_code == 201, r.text
    summary = wait_for(
        "the wake's prefetch_summary",
        lambda: [
            e
            for n in fleet.procs
            for e in fleet.procs[n].events()
            if e.get("event") == "prefetch_summary"
            and e.get("seat") == "recaller"
            and e.get("trigger_requires_recon")
        ],  # fmt: skip
        timeout=60,
    )[0]
    assert summary["recall"] == "recency+word_match" and summary["embeddings"] is False
    assert summary["blocks"]["personal_memory"]["selection_count"] == 3
    assert "similar_prior_work" not in summary["blocks"]
    assert len(fleet.llm.filter_requests) == filters


def test_every_ingress_reads_the_same_memory(fleet: Fleet) -> None:
    answers = []
    for name in ("b", "c", "d"):
        node = fleet.nodes[name]
        r = node.get("/agents/keeper-s/memory", timeout=30)
        assert r.status_code == 200, r.text
        answers.append(sorted(e["content"] for e in r.json()["personal_memories"]["long"]))
        reader = node.get("/agents/keeper-s/memory", token=READER)
        assert reader.status_code == 403, reader.text
        human = node.get("/agents/founder/memory")
        assert human.status_code == 404 and human.json()["error"] == "no_such_agent", human.text
        assert node.get("/agents/nobody/memory").status_code == 404
    assert answers == [sorted(ENTRIES["keeper-s"])] * 3
    assert os.path.isdir(HOOKS)
