"""Issue 5's "Done when": three node processes on a 3-member NATS cluster, faults, and the history.

One fleet per module (:func:`tests.fleet.conftest.fleet`): nodes ``a``, ``b``, ``c`` with every
role, nine agent seats, a 3 s lease TTL (heartbeat 1 s, sweep 5 s) and a 5 s mailbox ack window.
Each fault test restores what it broke and waits until every seat is owned exactly once again;
after each one the recorded history (every lease grant, renew and release with its epoch, every
turn admission and commit, every ack, from every process incarnation) is checked by
:class:`tests.support.history.History`. The measured handover times are printed (``-s``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import httpx
import pytest

from tests.fleet.harness import SEATS, TTL, Fleet, new_id, wait_for
from tests.fleet.llm import Request
from tests.support.procs import REPO, TOKEN, free_port, node_file

pytestmark = pytest.mark.fleet


def _report(what: str, seconds: float) -> None:
    print(f"\n[fleet timing] {what}: {seconds:.2f} s (lease TTL {TTL:.0f} s, sweep 5 s)")


def _handed_over(fleet: Fleet, seats: list[str], victim: str) -> bool:
    owners = fleet.owners()
    return all(owners.get(s) not in (None, victim) for s in seats)


def test_three_nodes_own_every_seat_exactly_once(fleet: Fleet) -> None:
    fleet.wait_converged(30)
    views = [fleet.view(n) for n in fleet.names]
    ownership = [{s["seat"]: (s["node"], s["epoch"]) for s in v["seats"]} for v in views]
    assert ownership[0] == ownership[1] == ownership[2], "ingress nodes disagree on ownership (FL-152)"
    assert sorted(ownership[0]) == sorted(SEATS)
    per_node = Counter(node for node, _ in ownership[0].values())
    assert sorted(per_node) == ["a", "b", "c"] and max(per_node.values()) <= 3  # ceil(9 / 3)
    assert views[0]["unowned_seats"] == [] and views[0]["unmanned_roles"] == []
    assert [n["id"] for n in views[0]["nodes"]] == ["a", "b", "c"]
    # every seat answers, once, whichever ingress node took the message
    ids = [fleet.post_message(seat, f"hello {seat}", via=fleet.names[i % 3]) for i, seat in enumerate(SEATS)]
    fleet.wait_handled(*ids)
    fleet.check_history()


def test_fleet_status_against_each_node_prints_the_fleet(fleet: Fleet) -> None:
    view = fleet.view()
    env = {**os.environ, "CREWLET_API_TOKEN": TOKEN}
    for name in fleet.names:
        out = subprocess.run(
            ["make", "-s", "-o", ".venv/.installed", "fleet-status", f"CREWLET_URL={fleet.nodes[name].url}"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.stdout.splitlines() if "│" in line]
        assert f"asked {name}" in out.stdout
        nodes = {r[0]: r for r in rows if r and r[0] in fleet.names}
        assert sorted(nodes) == ["a", "b", "c"]
        for row in nodes.values():
            assert row[1] == "data,ingress,seats,workers" and row[3] == "client", row
        seats = {r[0]: r for r in rows if r and r[0] in SEATS}
        for s in view["seats"]:
            assert seats[s["seat"]][1:3] == [s["node"], str(s["epoch"])], (s, seats.get(s["seat"]))
        duties = {r[0] for r in rows if r and r[0] in ("scheduler", "maintenance")}
        assert duties == {"scheduler", "maintenance"}
        assert "unmanned roles: none" in out.stdout


def test_a_signed_webhook_posted_to_two_nodes_is_handled_once(fleet: Fleet) -> None:
    delivery = new_id()
    before = len(fleet.llm.requests("triage"))
    with ThreadPoolExecutor(2) as pool:  # the same delivery at two ingress nodes at once
        answers = list(pool.map(lambda via: fleet.post_github(via, delivery), ["a", "b"]))
    answers.append(fleet.post_github("c", delivery))
    codes = sorted(r.status_code for r in answers)
    assert codes == [200, 200, 202], [r.text for r in answers]
    accepted = next(r.json() for r in answers if r.status_code == 202)
    assert all(r.json()["status"] == "duplicate" for r in answers if r.status_code == 200)
    assert accepted["seat"] == "triage"
    fleet.wait_handled(accepted["event_id"])
    assert len(fleet.commits(accepted["event_id"])) == 1
    assert len([r for r in fleet.llm.requests("triage")[before:] if r.first_round]) == 1
    fleet.check_history()


def test_an_ask_from_a_seat_on_one_node_is_answered_by_a_seat_on_another(fleet: Fleet) -> None:
    # FL-124 / CO-36: the channel and both wakes cross nodes; the asker's next turn reads the answer
    owners = fleet.owners()
    asker = next(s for s in SEATS if s != "lead")
    target = next(s for s in SEATS if owners[s] != owners[asker] and s != "lead")
    fleet.llm.asks[asker] = target
    before = len(fleet.llm.requests(asker))
    event_id = fleet.post_message(asker, "What is the state of the release?")
    fleet.wait_handled(event_id)
    answer = f"answered by {target}"

    def answer_seen() -> Request | None:
        got = [r for r in fleet.llm.requests(asker)[before:] if r.first_round and answer in r.text]
        return got[0] if got else None

    wait_for(f"{asker}'s next turn reading {target}'s answer", answer_seen, timeout=30)
    asked = [e for e in fleet.events(owners[target], "seat_turn_committed") if e.get("seat") == target]
    assert asked, f"{target}'s answering turn did not commit on {owners[target]}"
    with fleet.api() as c:
        status = c.get(f"/messages/{fleet.message_ids[event_id]}").json()
    assert status["status"] == "answered", status
    opened = [e for n in fleet.names for e in fleet.events(n, "a2a_channel_opened")]
    closed = [e for n in fleet.names for e in fleet.events(n, "a2a_channel_closed")]
    assert len(opened) == 1 and opened[0].get("target") == target, opened
    assert [e.get("reason") for e in closed] == ["answered"], closed
    fleet.check_history()


def test_sigterm_during_a_turn_finishes_it_and_hands_the_seats_over(fleet: Fleet) -> None:
    fleet.wait_converged(60)
    victim, peer = "b", "a"
    seats = fleet.held()[victim]
    busy, idle = seats[0], seats[1:]
    node = fleet.nodes[victim]
    fleet.llm.delays[busy] = 10.0  # longer than the TTL, and than the idle seats' handover
    n0 = len(fleet.llm.requests(busy))
    running = fleet.post_message(busy, "a slow question", via=peer)
    fleet.llm.wait_first_round(busy, n0)
    t0 = time.monotonic()
    node.signal(signal.SIGTERM)
    # the draining node refuses new work with 503 + Retry-After, so a client goes to a peer (FL-129)
    wait_for("the drain", lambda: node.get("/health", token=None).json()["shutting_down"], timeout=10)
    r = httpx.post(
        f"{node.url}/seats/{busy}/messages",
        json={"text": "too late"},
        headers={"Authorization": f"Bearer {TOKEN}"},
    )
    assert r.status_code == 503 and r.headers.get("Retry-After"), r.text
    # mail for its seats sent through a peer during the drain is not lost
    later = [fleet.post_message(s, f"during the drain {s}", via=peer) for s in idle]
    # as each goes idle, within a sweep: well before the running turn ends (FL-129)
    wait_for("the idle seats handed over", lambda: _handed_over(fleet, idle, victim), timeout=9)
    t_idle = time.monotonic() - t0
    wait_for("every seat handed over", lambda: _handed_over(fleet, seats, victim), timeout=30)
    t_all = time.monotonic() - t0
    assert node.wait(30) == 0, node.output()[-3000:]
    _report("SIGTERM -> idle seats owned by peers", t_idle)
    _report("SIGTERM (a turn of 10 s running) -> every seat owned by peers", t_all)
    # the turn finished on the draining node, and was not run again anywhere
    commits = fleet.commits(running)
    assert len(commits) == 1 and commits[0][0].startswith(f"{victim}#"), commits
    fleet.wait_handled(running, *later)
    del fleet.llm.delays[busy]
    fleet.check_history()
    fleet.start(victim).wait_ready(60)
    fleet.wait_converged(60)
    fleet.check_history()


def test_kill_9_reowns_within_ttl_redelivers_and_the_ledger_stops_a_second_turn(fleet: Fleet) -> None:
    fleet.wait_converged(60)
    victim, peer = "c", "a"
    seats = fleet.held()[victim]
    committed, slow = seats[0], seats[1]
    proxy = fleet.proxies[victim]
    # a turn under way on `slow` when the node dies: fetched, never acked
    fleet.llm.delays[slow] = 60.0
    n0 = len(fleet.llm.requests(slow))
    in_flight = fleet.post_message(slow, "a question the node will not finish", via=peer)
    fleet.llm.wait_first_round(slow, n0)
    # a turn on `committed` that finished and wrote the ledger; its ack is held at the proxy
    proxy.hold_ack(committed)
    done = fleet.post_message(committed, "a question answered just before the crash", via=peer)
    assert proxy.held.wait(30), "the node never acked the finished turn"
    node = fleet.nodes[victim]
    t0 = time.monotonic()
    node.signal(signal.SIGKILL)
    node.wait(5)
    fleet.llm.delays[slow] = 0.0
    assert [label for label, _ in fleet.commits(done)] == [f"{victim}#{_incarnation(fleet, victim)}"]
    # within TTL + one sweep, give or take the sweep's phase: a deadline, not a timing assertion
    wait_for(
        "every seat owned again", lambda: _handed_over(fleet, seats, victim), timeout=TTL + 2 * 5.0 + 5.0
    )
    _report("kill -9 -> every seat owned again", time.monotonic() - t0)
    fleet.wait_handled(in_flight, done, timeout=40)
    t_redelivered = time.monotonic() - t0
    _report("kill -9 -> fetched-but-unacked mail handled by the successor", t_redelivered)
    # the finished turn's delivery came back and the ledger said done: no second turn
    assert len(fleet.commits(done)) == 1
    skipped = [
        e
        for label, n in fleet.procs.items()
        if not label.startswith(victim)
        for e in n.events()
        if e.get("event") == "turn_trigger_skipped" and done in (e.get("event_ids") or [])
    ]
    assert len(skipped) == 1, skipped
    # the unfinished one was delivered again and ran once, on a peer
    admitted = [e for e in fleet.events(victim, "seat_turn_admitted") if in_flight in e["event_ids"]]
    assert len(admitted) == 1
    seq = admitted[0]["stream_seq"]
    again = [
        e
        for label, n in fleet.procs.items()
        if not label.startswith(victim)
        for e in n.events()
        if e.get("event") == "inbox_fetched" and e.get("seat") == slow and e.get("stream_seq") == seq
    ]
    assert again and again[0]["num_delivered"] >= 2, again
    commits = fleet.commits(in_flight)
    assert len(commits) == 1 and not commits[0][0].startswith(victim)
    del fleet.llm.delays[slow]
    fleet.check_history()
    proxy.restore()
    fleet.start(victim).wait_ready(60)
    fleet.wait_converged(60)
    fleet.check_history()


def _incarnation(fleet: Fleet, name: str) -> int:
    return sum(1 for label in fleet.procs if label.split("#")[0] == name)


def _work_titled(fleet: Fleet, title: str) -> list[dict[str, Any]]:
    with fleet.api() as c:
        r = c.get("/work", params={"project": "SUP"})
        assert r.status_code == 200, r.text
        return [i for i in r.json()["items"] if i["title"] == title]


def test_sigstop_past_the_ttl_then_sigcont_lands_nothing_and_converges(fleet: Fleet) -> None:
    fleet.wait_converged(60)
    victim, peer = "a", "b"
    seats = fleet.held()[victim]
    seat = seats[0]
    node = fleet.nodes[victim]
    title = f"stopped-{new_id()}"
    fleet.llm.tool_seats.add(seat)  # the turn's first round asks to create a work item
    fleet.llm.delays[seat] = 1.0  # and its answer arrives while the node is stopped
    n0 = len(fleet.llm.requests(seat))
    event = fleet.post_message(seat, title, via=peer)
    fleet.llm.wait_first_round(seat, n0)
    t0 = time.monotonic()
    fleet.pause(victim)
    try:
        fleet.llm.delays[seat] = 0.0
        wait_for(
            "a peer took the busy seat", lambda: fleet.owners().get(seat) not in (None, victim), timeout=30
        )
        _report("SIGSTOP -> the busy seat owned by a peer", time.monotonic() - t0)
    finally:
        fleet.resume(victim)
    t1 = time.time()

    def after_resume() -> str | None:
        if node.popen.poll() is not None:
            return "ended by the watchdog"
        lost = {e["seat"] for e in fleet.events(victim, "seat_lost") if _ts(e) >= t1 - 1}
        return "let go of its seats" if lost >= set(seats) else None

    # Resumed, the node finds every lease gone and lets go of its seats (its renews are refused),
    # unless its watchdog ends it first: the event loop did not turn for longer than the TTL, the
    # condition FL-100 exits on (exit 75, or the faulthandler backstop after 2 x TTL), and the two
    # threads race at SIGCONT. Either way nothing it sends may land; a supervisor restarts it.
    outcome = wait_for("the resumed node lets go or is ended", after_resume, timeout=20)
    print(f"\n[fleet] SIGCONT after {time.monotonic() - t0:.1f} s stopped: the node {outcome}")
    if outcome == "ended by the watchdog":
        out = node.output()
        assert "crewlet watchdog:" in out or "Timeout (" in out, out[-3000:]
        fleet.start(victim).wait_ready(60)
    else:
        assert {e["reason"] for e in fleet.events(victim, "seat_lost") if _ts(e) >= t1 - 1} == {"lease_lost"}
    fleet.wait_handled(event, timeout=40)  # redelivered after the ack window, run by the successor
    fleet.wait_converged(60)
    successor = fleet.commits(event)
    assert len(successor) == 1 and not successor[0][0].startswith(victim), successor
    # nothing it wrote landed: one work item (the successor's), the message answered by the successor
    assert len(_work_titled(fleet, title)) == 1
    with fleet.api(peer) as c:
        status = c.get(f"/messages/{fleet.message_ids[event]}").json()
    assert status["status"] == "answered" and status["turn_id"] == successor[0][1]["turn_id"], status
    fleet.llm.tool_seats.discard(seat)
    del fleet.llm.delays[seat]
    fleet.check_history()


def _ts(e: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(e["timestamp"])).timestamp()


def test_killing_the_leases_leader_resumes_writes_and_every_seat_is_owned_once(fleet: Fleet) -> None:
    fleet.wait_converged(60)
    assert fleet.cluster is not None
    leader = fleet.stream_leader("KV_crewlet_leases")
    assert leader in ("n1", "n2", "n3"), leader
    t_kill = time.time()
    t0 = time.monotonic()
    fleet.cluster.kill(leader)
    try:

        def renewed_after() -> float | None:
            writes = [
                e.at for e in fleet.history().named("seat_renewed", "seat_claimed") if e.at > t_kill + 0.5
            ]
            return min(writes) if writes else None

        first = wait_for("a lease write after the election", renewed_after, timeout=60, every=0.5)
        _report("leases leader kill -9 -> first lease write", first - t_kill)
        fleet.wait_converged(60)
        _report("leases leader kill -9 -> every seat owned once", time.monotonic() - t0)
        event = fleet.post_message(SEATS[0], "still serving on two members")
        fleet.wait_handled(event)
        assert fleet.stream_leader("KV_crewlet_leases") not in ("", leader)
    finally:
        fleet.cluster.start(leader)
    fleet.cluster.wait_ready(60)
    fleet.wait_converged(60)
    fleet.check_history()


def test_a_broker_lost_longer_than_the_ttl_reports_and_the_rest_keep_serving(fleet: Fleet) -> None:
    fleet.wait_converged(60)
    victim, peer = "b", "c"
    seats = fleet.held()[victim]
    proxy = fleet.proxies[victim]
    t_cut = time.time()
    proxy.cut()
    try:
        wait_for("peers own the cut node's seats", lambda: _handed_over(fleet, seats, victim), timeout=30)

        def reported() -> list[dict[str, Any]] | None:
            got = [e for e in fleet.events(victim, "seat_lost") if _ts(e) >= t_cut]
            return got if {e["seat"] for e in got} >= set(seats) else None

        lost = wait_for("the cut node reports its seats lost", reported, timeout=20)
        assert all(e["detail"] == "no successful renew for a full TTL" for e in lost), lost
        assert [e for e in fleet.events(victim, "broker_disconnected") if _ts(e) >= t_cut]
        event = fleet.post_message(seats[0], "served by a peer while b is cut off", via=peer)
        fleet.wait_handled(event)
        assert not fleet.commits(event)[0][0].startswith(victim)
    finally:
        proxy.restore()
    fleet.wait_converged(60)
    assert [e for e in fleet.events(victim, "broker_reconnected") if _ts(e) >= t_cut]
    fleet.check_history()


def test_a_node_id_shared_by_two_processes_is_reported_and_the_fleet_keeps_serving(fleet: Fleet) -> None:
    fleet.wait_converged(60)
    assert fleet.cluster is not None
    path = node_file(
        fleet.root / "a-dup",
        node_id="a",
        port=free_port(),
        stream={"type": "nats", "url": fleet.cluster.urls, "replicas": 3, "ack_wait_seconds": 5.0},
        coordination={"type": "embedded-kv", "lease_ttl_seconds": TTL},
        logging={"level": "debug", "format": "json"},
    )
    dup = fleet.start("a-dup", node_file=path)
    try:
        dup.wait_ready(60)
        wait_for(
            "node_id_conflict reported",
            lambda: fleet.events("a", "node_id_conflict") or fleet.events("a-dup", "node_id_conflict"),
            timeout=20,
        )
        event = fleet.post_message(SEATS[4], "served while two processes share an id")
        fleet.wait_handled(event)
        assert fleet.converged() == ""
    finally:
        dup.signal(signal.SIGTERM)
        assert dup.wait(30) == 0, dup.output()[-3000:]
    fleet.wait_converged(60)
    fleet.check_history()
