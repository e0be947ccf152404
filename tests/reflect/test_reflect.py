"""The memory tools and the reflect dispatcher on real processes (AG-3..AG-6).

One fleet for the module: a real nats-server and two crewlet nodes (every role, ``stream: nats``,
replicas 1) running the example company on a scripted model (:class:`tests.main_job.llm.OpenAIRouted`).
The lead has an auxiliary model (``llm: {default, auxiliary}``, answered by the server's
``respond`` hook: the auxiliary prompt names no seat); the dev is opted out
(``learning_enabled: false``). Both nodes carry a ``sitecustomize.py`` on ``PYTHONPATH``: the
fault hook ``reflect_worker:episodist``, raising for the docs seat only. Memory is read from the
``CREWLET_MEMORY`` log itself (what every data node applies), newest record per subject.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
import yaml

from services.seats.recall import FILTER_MARK
from shared.estate.log._record import Record
from tests.main_job.llm import OpenAIRouted
from tests.main_job.support import post_message, wait_for
from tests.main_job.wire import OPENAI
from tests.support.llm_servers import Reply, openai_text, openai_tools
from tests.support.procs import REPO, NatsServer, Node, free_port, node_file, write_yaml

FACT = "Rui prefers answers in one short paragraph."
FAULT_HOOK = '''"""Fault hook reflect_worker:episodist (AG-6), for the docs seat only: injected by tests/reflect."""
from services.reflect import _workers

_real = _workers.WORKERS["episodist"]


async def _episodist(job):
    if job.seat.handle == "docs":
        raise RuntimeError("fault hook reflect_worker:episodist")
    return await _real(job)


_workers.WORKERS["episodist"] = _episodist
'''


class Fleet:
    """The module's nats-server, two nodes and scripted model; :meth:`stop` ends every process."""

    def __init__(self, root: Path) -> None:
        self.aux_replies: list[str] = []
        self.llm = OpenAIRouted(respond=self._respond)
        self.nats = NatsServer(root / "nats")
        self.nodes: list[Node] = []
        hook = root / "hook"
        hook.mkdir()
        (hook / "sitecustomize.py").write_text(FAULT_HOOK)
        company = self._company(root / "company.yaml")
        for name in ("ra", "rb"):
            port = free_port()
            path = node_file(
                root / name,
                node_id=name,
                port=port,
                stream={"type": "nats", "url": self.nats.url, "replicas": 1, "ack_wait_seconds": 5.0},
                coordination={"type": "embedded-kv", "lease_ttl_seconds": 15.0},
                logging={"level": "info", "format": "json"},
            )
            argv = ["node", "--node", str(path), "--company", str(company)]
            self.nodes.append(Node(argv, dir=root / name / "run", port=port, env={"PYTHONPATH": str(hook)}))
        for node in self.nodes:
            node.wait_ready(60)
        wait_for("every agent seat held once, by both nodes", self._placed, timeout=60)

    def _placed(self) -> bool:
        held = [node.get("/health", token=None).json()["seats"]["held"] for node in self.nodes]
        every = sorted(h for hs in held for h in hs)
        return every == ["dev", "docs", "lead", "triage"] and all(held)

    def _company(self, path: Path) -> Path:
        data = yaml.safe_load((REPO / "examples" / "company.yaml").read_text())
        data["providers"]["llm"] = {"default": OPENAI.entry(self.llm)}
        for unit in data["units"]:
            for role in unit["roles"]:
                if role["handle"] == "lead":
                    role["llm"] = {"default": "default", "auxiliary": "default"}
                if role["handle"] == "dev":
                    role["learning_enabled"] = False
        return write_yaml(path, data)

    def _respond(self, seat: str, body: Any) -> Reply:
        system = json.dumps(body)
        if seat != "?":  # an executor whose script ran out: fail loudly
            return Reply({"error": {"message": f"script exhausted for seat {seat!r}"}}, status=500)
        if FILTER_MARK in system:  # recall's filter at a turn's start (AG-8): nothing picked here
            return openai_text("none")
        if "private diary" in system:  # the persist decider (AG-3)
            return openai_text(self.aux_replies.pop(0) if self.aux_replies else "NOOP")
        if "counterparty" in system:  # the profiler's traits (AG-5)
            return openai_text('{"prefers": "short answers"}')
        return Reply({"error": {"message": f"no script for seat {seat!r}"}}, status=500)

    def events(self, name: str, **match: Any) -> list[dict[str, Any]]:
        """Log events called ``name`` on every node, each with ``_node``, matching ``match``."""
        out = []
        for node in self.nodes:
            for e in node.events():
                if e.get("event") == name and all(e.get(k) == v for k, v in match.items()):
                    out.append({**e, "_node": node.url})
        return out

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        self.nats.stop()
        self.llm.stop()


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    f = Fleet(tmp_path_factory.mktemp("reflect"))
    try:
        yield f
    finally:
        f.stop()


# -- reading and publishing on the broker ---------------------------------------------------------


async def _rows(url: str, handle: str, table: str) -> list[dict[str, Any]]:
    nc = await nats.connect(url, connect_timeout=5, max_reconnect_attempts=0)
    try:
        js = nc.jetstream()
        sub = await js.subscribe(f"crewlet.memory.{handle}.{table}.>", ordered_consumer=True)
        info = await js.stream_info("CREWLET_MEMORY", subjects_filter=f"crewlet.memory.{handle}.{table}.>")
        want = sum((info.state.subjects or {}).values())
        latest: dict[str, dict[str, Any] | None] = {}
        for _ in range(want):
            msg = await sub.next_msg(timeout=5)
            rec = Record.decode(msg.data)
            latest[msg.subject] = rec.payload.get("row") if rec.kind == "memory_put" else None
        await sub.unsubscribe()
        return [r for r in latest.values() if r is not None]
    finally:
        await nc.close()


def rows(fleet: Fleet, handle: str, table: str) -> list[dict[str, Any]]:
    """``handle``'s live rows of ``table`` on the memory log."""
    return asyncio.run(_rows(fleet.nats.url, handle, table))


def publish(fleet: Fleet, payload: Any) -> None:
    """Publish one ``agent_turn_completed`` as a node would (a redelivered trigger's twin)."""

    async def go() -> None:
        nc = await nats.connect(fleet.nats.url, connect_timeout=5, max_reconnect_attempts=0)
        try:
            raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            await nc.jetstream().publish("crewlet.events.agent_turn_completed", raw)
        finally:
            await nc.close()

    asyncio.run(go())


def message(
    fleet: Fleet, seat: str, text: str, *calls: tuple[str, Any], sender: str = "rui-lanternfish"
) -> str:
    """Post an API message to ``seat`` (first node) whose turn makes ``calls`` then submits; wait
    until it settles; its turn id."""
    fleet.llm.add(
        seat,
        openai_tools(*calls),
        openai_tools(("submit_work", {"outcome": "delivered", "summary": "Done."})),
    )
    node = fleet.nodes[0]
    r = post_message(node, seat, text, **({"sender": sender} if sender else {}))
    assert r.status_code == 202, r.text
    mid = r.json()["message_id"]

    def settled() -> dict[str, Any] | None:
        got = node.get(f"/messages/{mid}")
        body = got.json() if got.status_code == 200 else {}
        return body if body.get("status") in ("answered", "failed") else None

    done = wait_for(f"{seat}'s turn on {text!r}", settled, timeout=60)
    assert done["status"] == "answered", done
    return str(done["turn_id"])


def results(fleet: Fleet, seat: str) -> list[Any]:
    """The tool results the model read in ``seat``'s last executor request."""
    return list(OPENAI.results(fleet.llm.requests(seat)[-1].body))


def reflected(fleet: Fleet, turn_id: str, event: str = "reflection_completed") -> list[dict[str, Any]]:
    """Wait until some node logged ``event`` for ``turn_id``; every node's such events."""
    match = {"worker": "all"} if event == "reflection_skipped" else {}  # the pass's gate, not a worker's
    return wait_for(
        f"{event} for {turn_id}", lambda: fleet.events(event, turn_id=turn_id, **match), timeout=60
    )


def payload(seat: str, work_key: str, *, sender: str = "ana@example.com", **changes: Any) -> dict[str, Any]:
    """An ``agent_turn_completed`` payload as a node publishes it (``shared.turns.completed_payload``)."""
    base = {
        "turn_id": str(uuid.uuid4()),
        "work_key": work_key,
        "seat": seat,
        "agent_id": "",
        "role": "Support Triage",
        "node": "test",
        "outcome": "delivered",
        "review_outcome": "done",
        "settled_as": "done",
        "error_kind": None,
        "tools_called": ["search_knowledge", "submit_work"],
        "skills_offered": [],
        "reflect_and_persist_ran": False,
        "senders": [
            {
                "sender": sender,
                "platform": "webhook:forms",
                "body": "The export button is gone.",
                "event_ids": ["ev-" + work_key],
            }
        ],
        "work_item": None,
        "conversation_key": None,
        "task_summary": "The export button is gone.",
        "plan_summary": "Looked it up.",
        "started_at": 0.0,
        "ended_at": 0.0,
        "duration_ms": 1.0,
    }
    return {**base, **changes}


SEARCH = ("search_knowledge", {"query": "lantern"})


# -- AG-3 -------------------------------------------------------------------------------------------


def test_reflect_and_persist_refuses_by_name_and_a_same_text_twin_collapses(fleet: Fleet) -> None:
    message(
        fleet,
        "lead",
        "Please remember how Rui likes answers.",
        ("reflect_and_persist", {"content": "x" * 2001}),
        ("reflect_and_persist", {"content": FACT, "kind": "diary_weekly"}),
        ("reflect_and_persist", {"content": FACT, "kind": "diary_short"}),
        ("reflect_and_persist", {"content": FACT, "ttl_days": 3}),
        ("reflect_and_persist", {"content": FACT}),
    )
    too_long, kind, short, long_ttl, ok = results(fleet, "lead")
    assert (
        too_long.is_error and too_long.content["field"] == "content" and "2 000" in too_long.content["error"]
    )
    assert kind.is_error and kind.content["field"] == "kind"
    assert short.is_error and short.content["field"] == "ttl_days" and "1 and 365" in short.content["error"]
    assert long_ttl.is_error and long_ttl.content["field"] == "ttl_days"
    assert not ok.is_error and ok.content["status"] == "written", ok.content
    # the same text in a second turn: one row (uuid5 of the content, first writer wins)
    message(fleet, "lead", "Remember it again, please.", ("reflect_and_persist", {"content": FACT}))
    (again,) = results(fleet, "lead")
    assert (
        not again.is_error
        and again.content["status"] == "collapsed"
        and again.content["id"] == ok.content["id"]
    )
    diary = rows(fleet, "lead", "agent_diary")
    assert [r["content"] for r in diary] == [FACT] and diary[0]["kind"] == "diary_long"


def test_the_persist_decider_asks_the_auxiliary_model_and_drops_an_over_long_proposal(fleet: Fleet) -> None:
    fleet.aux_replies += ["LONG: Rui reviews releases on Fridays.", "LONG: " + "y" * 2001]
    first = message(fleet, "lead", "When does Rui review releases?", SEARCH)
    assert reflected(fleet, first)[0]["workers"] == ["episodist", "persist_decider", "profiler"]
    second = message(fleet, "lead", "Tell me about the release train.", SEARCH)
    reflected(fleet, second)
    assert fleet.events("persist_decider_skipped", turn_id=second)
    contents = [r["content"] for r in rows(fleet, "lead", "agent_diary")]
    assert "Rui reviews releases on Fridays." in contents and not any(c.startswith("yyy") for c in contents)
    charged = fleet.events("auxiliary_call_completed", seat="lead", worker="persist_decider")
    assert charged and charged[0]["phase"] == "auxiliary"


# -- AG-4 -------------------------------------------------------------------------------------------


def test_query_episodes_ranks_shared_words_and_refuses_limit_21(fleet: Fleet) -> None:
    turn = message(
        fleet, "triage", "The lantern.toml loader crashes when the file is empty.", SEARCH, sender=""
    )
    reflected(fleet, turn)
    message(
        fleet,
        "triage",
        "Have we seen this before?",
        ("query_episodes", {"query": "x", "limit": 21}),
        ("query_episodes", {"query": "empty lantern.toml crash"}),
        sender="",
    )
    refused, found = results(fleet, "triage")
    assert refused.is_error and refused.content["field"] == "limit" and "1..20" in refused.content["error"]
    assert not found.is_error and found.content["similarity"] == "unavailable"
    assert "lantern.toml" in found.content["episodes"][0]["task_summary"]
    # FL-75's duplicate trigger worked twice (two turns, one work key): one episode
    work_key = "wk-" + uuid.uuid4().hex
    twins = [payload("triage", work_key), payload("triage", work_key)]
    for p in twins:
        publish(fleet, p)
    for p in twins:
        wait_for(
            "both twins reflected or skipped",
            lambda p=p: (
                fleet.events("reflection_completed", turn_id=p["turn_id"])
                or fleet.events("reflection_skipped", turn_id=p["turn_id"], gate="duplicate")
            ),
            timeout=60,
        )
    assert [r["work_key"] for r in rows(fleet, "triage", "episodes")].count(work_key) == 1


# -- AG-5 -------------------------------------------------------------------------------------------


def test_profiles_count_once_per_work_key_and_stay_private(fleet: Fleet) -> None:
    # the lead meets Rui in a turn; the triage seat asks about Rui, whom it never met
    reflected(fleet, message(fleet, "lead", "Rui here: is ENG busy?", SEARCH))
    message(fleet, "triage", "Who is Rui?", ("lookup_colleague", {"query": "rui-lanternfish"}), sender="")
    (seen_by_triage,) = results(fleet, "triage")
    assert (
        seen_by_triage.content["match"]["handle"] == "founder"
        and seen_by_triage.content["my_profile"] is None
    )
    message(fleet, "lead", "Who is Rui again?", ("lookup_colleague", {"query": "rui-lanternfish"}))
    (seen_by_lead,) = results(fleet, "lead")
    mine = seen_by_lead.content["my_profile"]
    assert mine is not None and mine["subject_handle"] == "founder" and mine["interaction_count"] >= 1
    # two deliveries with the same event ids (one work key) count once; a second work key counts
    work_key, ana = "wk-" + uuid.uuid4().hex, f"ana-{uuid.uuid4().hex[:8]}@example.com"
    twins = (payload("triage", work_key, sender=ana), payload("triage", work_key, sender=ana))
    for p in (*twins, payload("triage", work_key + "-2", sender=ana)):
        publish(fleet, p)
        wait_for(
            "reflected",
            lambda p=p: (
                fleet.events("reflection_completed", turn_id=p["turn_id"])
                or fleet.events("reflection_skipped", turn_id=p["turn_id"], worker="all")
            ),
            timeout=60,
        )
    (profile,) = [
        r for r in rows(fleet, "triage", "counterparty_profiles") if r["subject_external_id"] == ana
    ]
    assert profile["interaction_count"] == 2 and profile["last_work_key"] == work_key + "-2"
    assert not [r for r in rows(fleet, "lead", "counterparty_profiles") if r["subject_external_id"] == ana]


# -- AG-6 -------------------------------------------------------------------------------------------


def test_one_settled_turn_is_reflected_once_on_two_nodes(fleet: Fleet) -> None:
    turn = message(fleet, "triage", "Is the docs site down?", SEARCH)
    done = reflected(fleet, turn)
    assert len(done) == 1 and done[0]["workers"] == ["episodist", "profiler"]
    assert [r["turn_id"] for r in rows(fleet, "triage", "episodes")].count(turn) == 1
    # the decider of a seat with no auxiliary model skips by name
    assert fleet.events(
        "reflection_skipped", turn_id=turn, worker="persist_decider", gate="no_auxiliary_model"
    )
    joined = {e["_node"] for e in fleet.events("fleet_group_joined", group="crewlet-reflect")}
    assert len(joined) == 2


def test_an_opted_out_seat_is_skipped_and_leaves_no_rows(fleet: Fleet) -> None:
    turn = message(fleet, "dev", "Please look at ENG-1.", SEARCH)
    (skipped,) = reflected(fleet, turn, "reflection_skipped")
    assert skipped["gate"] == "opted_out"
    assert not fleet.events("reflection_completed", turn_id=turn)
    assert rows(fleet, "dev", "episodes") == [] and rows(fleet, "dev", "counterparty_profiles") == []


def test_a_raising_episodist_does_not_stop_the_profiler(fleet: Fleet) -> None:
    turn = message(fleet, "docs", "The install guide has a typo.", SEARCH)
    (done,) = reflected(fleet, turn)
    assert done["workers"] == ["profiler"]
    (failed,) = fleet.events("reflect_worker_failed", turn_id=turn)
    assert failed["worker"] == "episodist" and "fault hook" in failed["error"]
    assert [r["subject_handle"] for r in rows(fleet, "docs", "counterparty_profiles")] == ["founder"]
    assert rows(fleet, "docs", "episodes") == []


def test_gates_skip_by_name(fleet: Fleet) -> None:
    bad = payload("triage", "wk-bad")
    del bad["senders"]
    publish(fleet, bad)
    assert reflected(fleet, bad["turn_id"], "reflection_skipped")[0]["gate"] == "malformed"
    idle = payload("triage", "wk-" + uuid.uuid4().hex, tools_called=["submit_work"])
    publish(fleet, idle)
    assert reflected(fleet, idle["turn_id"], "reflection_skipped")[0]["gate"] == "no_engagement"
    human = payload("founder", "wk-" + uuid.uuid4().hex)
    publish(fleet, human)
    assert reflected(fleet, human["turn_id"], "reflection_skipped")[0]["gate"] == "no_role"
