"""A satellite that does real work (FL-144, FL-63, FL-86, ES-78), with real processes.

Three embedded members (clustered, each with a leaf listener, all four roles) and one satellite
``s`` (``roles: [seats]``, scratch store, a leaf of every member), all started at the same time. The
company's extra seat ``sat`` is pinned to ``s`` (``placement.node``), so the test knows where it runs.

1. A message to ``sat`` (posted to a member's ingress) is answered; its turn's ``create_work_item`` and
   ``write_page`` went through the router to the members' estate (the item and the page read back
   from a member); its ``turn.finished`` event, and the ``config_revision_applied`` events it
   published, are each on exactly one data node (custody): read out of every member's ``node.db``
   and seen through ``GET /events``. The satellite never joined the custody group.
2. The data copies become unreachable while the brokers keep quorum: the three member crewlet
   processes are SIGSTOPped (their child nats-servers are separate processes and run on). A turn
   of ``sat`` under way at that moment gets tool answers naming the estate nobody served; the
   satellite logs ``fleet_role_unmanned role=data`` and ``seats_shed_unserviceable``, and its
   ``/ready`` answers 503 ``admission_withheld``.
3. SIGCONT (a member whose watchdog ended it meanwhile is started again, as its supervisor would):
   the satellite is re-admitted, claims ``sat`` again, a new message is answered with working tools,
   and the event of the turn that ran during the outage reaches exactly one data node.

Bad input: a satellite file that also asks for ``data`` on its scratch store is refused by name.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fleet.harness import wait_for
from tests.support.embedded import EmbeddedFleet
from tests.support.llm_servers import openai_tools
from tests.support.procs import REPO, TOKEN, node_file

pytestmark = pytest.mark.fleet

SAT = "sat"
PINNED = {"name": "Satellite agent", "handle": SAT, "goal": "Work from the edge", "placement": {"node": "s"}}
MEMBERS = ("a", "b", "c")


class _Script:
    """``sat``'s first round calls ``create_work_item`` and ``write_page`` titled ``expect`` (the text of
    the message the test posted last: the model is shown more than the trigger); the tool results
    ``sat`` is shown are kept (``results``: (title, results) per turn)."""

    def __init__(self, fleet: EmbeddedFleet) -> None:
        self.results: list[tuple[str, list[str]]] = []
        self._title = ""
        self.expect = ""
        self._answer = fleet.llm._answer
        fleet.llm._answer = self.answer  # type: ignore[method-assign]

    def answer(self, body: dict[str, Any], authorization: str = "") -> Any:
        reply, delay = self._answer(body, authorization)
        messages = body["messages"]
        if f"(handle `{SAT}`)" not in str(messages[0]["content"]):
            return reply, delay
        if messages[-1].get("role") == "tool":
            tail: list[str] = []
            for m in reversed(messages):
                if m.get("role") != "tool":
                    break
                tail.insert(0, str(m.get("content")))
            self.results.append((self._title, tail))  # one turn of the seat at a time
            return reply, delay
        title = self._title = self.expect
        calls = (
            ("create_work_item", {"project": "SUP", "title": title}),
            ("write_page", {"space": "SUP", "title": title, "body": f"written from the satellite: {title}"}),
        )
        return openai_tools(*calls), delay


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedFleet]:
    f = EmbeddedFleet(tmp_path_factory.mktemp("satellite"), satellites=("s",), extra_roles=[PINNED])
    try:
        f.start_all(timeout=120)  # members and satellite at once
        yield f
    finally:
        f.stop()


def _results(script: _Script, title: str) -> list[str] | None:
    """The tool results of the latest turn of ``sat`` about ``title``."""
    found = [tail for t, tail in script.results if t.endswith(title)]
    return found[-1] if found else None


def _post(fleet: EmbeddedFleet, via: str, text: str, script: _Script) -> tuple[str, str]:
    script.expect = text
    with fleet.api(via) as c:
        r = c.post(f"/seats/{SAT}/messages", json={"text": text})
    assert r.status_code == 202, r.text
    return str(r.json()["event_id"]), str(r.json()["message_id"])


def _answered(fleet: EmbeddedFleet, via: str, message_id: str) -> dict[str, Any] | None:
    try:
        with fleet.api(via) as c:
            body = c.get(f"/messages/{message_id}").json()
    except httpx.HTTPError:
        return None
    return body if body.get("status") == "answered" else None


def _node_db(fleet: EmbeddedFleet, name: str) -> Path:
    return fleet.root / name / "store" / "node.db"


def _rows(fleet: EmbeddedFleet, name: str, where: str, *args: Any) -> list[dict[str, Any]]:
    """Event rows of member ``name``'s own log, read straight from its file (read-only)."""
    path = _node_db(fleet, name)
    if not path.exists():
        return []
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)) as db:
        db.row_factory = sqlite3.Row
        try:
            rows = db.execute(f"SELECT * FROM crewlet_events WHERE {where}", args).fetchall()
        except sqlite3.OperationalError:
            return []
    return [{**dict(r), "data": json.loads(r["data"])} for r in rows]


def _holders(fleet: EmbeddedFleet, event_id: str) -> dict[str, list[dict[str, Any]]]:
    return {m: rows for m in MEMBERS if (rows := _rows(fleet, m, "event_id = ?", event_id))}


def _turn_event_of(fleet: EmbeddedFleet, trigger: str) -> dict[str, dict[str, Any]] | None:
    """The members holding ``sat``'s turn.finished event whose trigger is ``trigger``."""
    out = {}
    for m in MEMBERS:
        for row in _rows(fleet, m, "event_type = 'turn.finished' AND agent_id = ?", SAT):
            if row["data"].get("trigger_event_id") == trigger:
                out[m] = row
    return out or None


def _since(fleet: EmbeddedFleet, name: str, event: str, mark: int) -> list[dict[str, Any]]:
    return fleet.events(name, event)[mark:]


def test_a_satellite_works_keeps_custody_and_withdraws_while_no_data_node_answers(
    fleet: EmbeddedFleet,
) -> None:
    script = _Script(fleet)
    fleet.wait_owner(SAT, "s", via="a", timeout=90)
    assert fleet.events("s", "seats_admitted"), "the satellite claimed before a data node confirmed"

    # 1. a message answered; its tools reached the estate through the router
    title = f"from-the-edge-{uuid.uuid4().hex[:8]}"
    trigger, message = _post(fleet, "a", title, script)
    answered = wait_for("sat's answer", lambda: _answered(fleet, "b", message), timeout=60)
    assert answered["status"] == "answered"
    results = wait_for("sat's tool results", lambda: _results(script, title), timeout=10)
    assert len(results) == 2 and not any("nobody answered" in r for r in results), results
    with fleet.api("b") as c:
        items = c.get("/work", params={"project": "SUP"}).json()["items"]
        assert [i["title"] for i in items if i["title"] == title] == [title]
        pages = c.get("/knowledge/pages", params={"space": "SUP"}).json()
        assert title in json.dumps(pages), pages

    # its turn's event is kept by exactly one data node (custody), naming origin and custodian
    held = wait_for("sat's turn event in custody", lambda: _turn_event_of(fleet, trigger), timeout=30)
    assert len(held) == 1, held
    [(custodian, row)] = held.items()
    assert row["node"] == custodian and row["data"]["custodian"] == custodian and row["data"]["origin"] == "s"
    assert row["source"] == "s" and row["data"]["outcome"] and row["trace_id"], row
    assert len(_holders(fleet, row["event_id"])[custodian]) == 1
    with fleet.api("c") as c:
        listed = c.get("/events", params={"event_type": "turn.finished", "agent_id": SAT}).json()
    assert [e["node"] for e in listed["events"] if e["event_id"] == row["event_id"]] == [custodian], listed
    # the satellite's config events too, each on one node; the satellite never joined custody
    applied = [
        r for m in MEMBERS for r in _rows(fleet, m, "event_type = 'config_revision_applied' AND source = 's'")
    ]
    assert applied, "the satellite's config_revision_applied events are in no data node's log"
    for r in applied:
        assert len([m for m in MEMBERS if _rows(fleet, m, "event_id = ?", r["event_id"])]) == 1
    # it joins the reflect group (AG-6: every node), never custody (FL-86)
    assert {e["group"] for e in fleet.events("s", "fleet_group_joined")} == {"crewlet-reflect"}
    assert all(
        [e for e in fleet.events(m, "fleet_group_joined") if e["group"] == "crewlet-custody"] for m in MEMBERS
    )

    # 2. the data copies unreachable, the brokers keeping quorum: a turn under way meets it
    marks = {e: len(fleet.events("s", e)) for e in ("fleet_role_unmanned", "seats_shed_unserviceable")}
    fleet.llm.delays[SAT] = 8.0  # the model answers after every member's presence lapsed (TTL 3 s)
    n0 = len(fleet.llm.requests(SAT))
    outage_title = f"during-the-outage-{uuid.uuid4().hex[:8]}"
    outage_trigger, _ = _post(fleet, "a", outage_title, script)
    fleet.llm.wait_first_round(SAT, n0, timeout=30)
    stopped = list(MEMBERS)
    try:
        for m in stopped:
            fleet.nodes[m].signal(signal.SIGSTOP)
        outage = wait_for(
            "the outage turn's tool results", lambda: _results(script, outage_title), timeout=60
        )
        print(f"\n[satellite] tool answers with no data node: {outage}")
        assert any("nobody answered for the tracker estate" in r for r in outage), outage
        assert any("nobody answered for the pages estate" in r for r in outage), outage
        unmanned = wait_for(
            "fleet_role_unmanned role=data on the satellite",
            lambda: [e for e in _since(fleet, "s", "fleet_role_unmanned", marks["fleet_role_unmanned"])
                     if e.get("role") == "data"],
            timeout=30,
        )  # fmt: skip
        assert "stateless" in str(unmanned[0].get("lost")), unmanned
        shed = wait_for(
            "seats_shed_unserviceable on the satellite",
            lambda: _since(fleet, "s", "seats_shed_unserviceable", marks["seats_shed_unserviceable"]),
            timeout=40,
        )
        print(f"[satellite] shed: {shed[0]}")
        wait_for("the satellite holds no seat", lambda: fleet.held("s") == [], timeout=30)
        ready = fleet.nodes["s"].get("/ready", token=None)
        assert ready.status_code == 503 and ready.json()["reason"] == "admission_withheld", ready.text
    finally:
        fleet.llm.delays[SAT] = 0.0
        for m in stopped:
            fleet.nodes[m].signal(signal.SIGCONT)

    # 3. back: members resumed (or restarted when their watchdog ended them), the satellite re-admitted
    def members_ready() -> bool:
        ready = True
        for m in MEMBERS:
            node = fleet.nodes[m]
            if node.popen.poll() is not None:  # FL-100: stopped past the TTL, its watchdog may end it
                print(
                    f"[satellite] member {m} ended after SIGCONT (exit {node.popen.returncode}); starting it again"
                )
                fleet.start(m)
                ready = False
                continue
            try:
                ready = ready and node.get("/ready", token=None).status_code == 200
            except httpx.HTTPError:
                ready = False
        return ready

    wait_for("every member ready again", members_ready, timeout=180, every=1.0)
    wait_for("the satellite re-admitted", lambda: fleet.events("s", "seats_readmitted"), timeout=90)
    fleet.wait_owner(SAT, "s", via="a", timeout=90)
    assert fleet.nodes["s"].get("/ready", token=None).status_code == 200
    again = f"after-the-outage-{uuid.uuid4().hex[:8]}"
    _, message = _post(fleet, "b", again, script)
    wait_for("sat's answer after recovery", lambda: _answered(fleet, "c", message), timeout=90)
    done = wait_for("sat's tools after recovery", lambda: _results(script, again), timeout=30)
    print(f"[satellite] tool answers after recovery: {done}")
    assert len(done) == 2 and not any("nobody answered" in r for r in done), done

    def item_listed() -> bool:
        with fleet.api("a") as c:
            items = c.get("/work", params={"project": "SUP", "limit": 100}).json()["items"]
        return [i["title"] for i in items if i["title"] == again] == [again]

    wait_for("the item written after recovery, read on a member", item_listed, timeout=30)
    # the turn that ran during the outage: its event waited in the custody stream, now on one node
    held = wait_for(
        "the outage turn's event in custody", lambda: _turn_event_of(fleet, outage_trigger), timeout=60
    )
    assert len(held) == 1, held
    assert fleet.nodes["s"].popen.poll() is None


def test_a_satellite_file_asking_for_data_on_a_scratch_store_is_refused(tmp_path: Path) -> None:
    """Bad input (FL-17): ``data`` on a leaf with a scratch store is refused naming both fields."""
    path = node_file(
        tmp_path,
        node_id="s",
        port=0,
        node={"id": "s", "roles": ["seats", "data"]},
        store={"dir": str(tmp_path / "store"), "scratch": True},
        stream={"type": "embedded", "leaf": {"urls": ["nats-leaf://127.0.0.1:7422"]}},
    )
    out = subprocess.run(
        [sys.executable, "-m", "crewlet", "validate", "--node", str(path)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"CREWLET_API_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    said = out.stdout + out.stderr
    assert "node.roles" in said and "store.scratch" in said, said
