"""``python -m chaos``: its invariant checks on hand-built histories, its seeded schedule, and a real
run against a deliberately broken build that must report a violation with a rerunnable seed.

The broken build is injected from outside, never by a failpoint in the product: a
``sitecustomize.py`` on the nodes' ``PYTHONPATH`` (``--node-env``) replaces the seat lease renew
with one that skips its compare-and-set and reports success without writing. The lease key then
lapses at the TTL while its holder goes on acting under the old epoch, and a peer claims the next
one: the history must show a write under a superseded epoch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos._invariants import (
    INVARIANTS,
    digest_violations,
    duplicate_violations,
    estate_violations,
    excused_by_fl89,
    history_checks,
    turn_violations,
    unowned_violations,
)
from chaos._observe import commits_and_acks
from chaos._runner import Options, satellite_names
from chaos._schedule import BROKER_FAULTS, FAULTS, NODE_FAULTS, schedule_round
from tests.fleet.test_history import handover, history, line
from tests.support.procs import REPO

pytestmark = pytest.mark.timeout(300)

BROKEN_RENEW = '''"""Broken on purpose by tests/chaos: a seat lease renew that skips its compare-and-set."""
from dataclasses import replace

from shared.leases import _seat


async def _renew(self, grant, spent):
    return replace(grant, sent_at=self._clock())  # "renewed", and nothing was written


_seat.SeatLeases._renew = _renew
'''


def test_a_sound_hand_built_round_passes_every_invariant() -> None:
    h = history(handover())
    accepted = {"e1": "s", "e2": "s", "e3": "s"}
    checks = history_checks(h.violations(accepted=accepted, pending=["e3"]))
    assert [c.name for c in checks] == list(INVARIANTS[:5]) and all(c.ok for c in checks)
    assert turn_violations(accepted, {"e1": 1, "e2": 1}, pending=["e3"]) == []
    assert estate_violations(["item:ENG-1", "page:p1"], {n: {"item:ENG-1", "page:p1"} for n in "abc"}) == []
    same = {"position": [7, 3], "sha256": "d1"}
    assert digest_violations({"a": same, "b": same, "c": {"position": [8, 3], "sha256": "d2"}}) == []
    # a handover gap long after the heal (a rebalance) is fine; so is a stretch shorter than the limit
    samples = [(100.0, ["s"]), (105.0, []), (130.0, ["s"]), (130.5, [])]
    assert unowned_violations(samples, healed_at=95.0, limit=13.0) == []
    items = [{"key": "SUP-1", "title": "t1", "external": "github:1#1"}, {"key": "SUP-2", "title": "t2"}]
    assert duplicate_violations(items, ["t1", "t2"]) == []


def test_a_broken_hand_built_round_is_named_under_each_invariant() -> None:
    logs = handover()
    # a zombie of epoch 1 acks after b claimed epoch 2, and e1 is committed a second time
    logs["a#1"].append(line(12, "inbox_acked", seat="s", epoch=1, stream_seq=2, outcome="ack"))
    logs["b#1"].append(line(11, "seat_turn_committed", seat="s", epoch=2, stream_seq=3, event_ids=["e1"]))
    checks = {c.name: c for c in history_checks(history(logs).violations(accepted={"e1": "s"}))}
    assert not checks["no fenced write landed"].ok
    assert not checks["acked once"].ok
    assert not checks["handled once"].ok
    assert checks["epochs rise"].ok and checks["one owner per epoch"].ok
    found = turn_violations({"e1": "s", "e9": "s"}, {"e1": 2})
    assert any("completed 2 turns" in v for v in found) and any("e9" in v for v in found)
    found = estate_violations(
        ["item:ENG-1", "page:p1"], {"a": {"item:ENG-1", "page:p1"}, "b": {"item:ENG-1"}}
    )
    assert found == ["node b lacks 1 acknowledged write(s): page:p1"]
    assert digest_violations(
        {"a": {"position": [7, 3], "sha256": "d1"}, "b": {"position": [7, 3], "sha256": "d2"}}
    )
    samples = [(100.0, ["s"]), (110.0, ["s"]), (125.0, ["s"]), (126.0, [])]
    assert unowned_violations(samples, healed_at=100.0, limit=13.0) == [
        "seat s unowned for 26.0 s after the heal (limit 13 s; unowned since +0.0 s)"
    ]
    items = [
        {"key": "SUP-1", "title": "a", "external": "github:1#1"},
        {"key": "SUP-2", "title": "b", "external": "github:1#1"},
        {"key": "SUP-3", "title": "t"},
        {"key": "SUP-4", "title": "t"},
    ]
    assert len(duplicate_violations(items, ["t"])) == 2


def test_a_trigger_worked_twice_after_a_failed_ledger_write_is_excused_not_hidden() -> None:
    logs = handover()  # e1 worked again by b after a's ledger write failed (FL-89: fail open)
    logs["a#1"].insert(5, line(2.55, "ledger_write_failed", scope="s", key="e1", error="timed out"))
    logs["b#1"].append(line(11, "seat_turn_committed", seat="s", epoch=2, stream_seq=1, event_ids=["e1"]))
    h = history(logs)
    failed = {str(e.fields["key"]) for e in h.named("ledger_write_failed")}
    kept, excused = excused_by_fl89(h.violations(accepted={"e1": "s"}), failed)
    assert kept == [] and len(excused) == 1 and "event e1 committed 2 times" in excused[0]
    assert turn_violations({"e1": "s"}, {"e1": 2}, ledger_failed=failed) == []
    assert turn_violations({"e1": "s"}, {"e1": 2}) == ["trigger e1 for s completed 2 turns"]


def test_a_turn_whose_commit_line_a_kill_cut_off_counts_as_completed_by_the_ledger() -> None:
    logs = handover()  # a admitted e3 and wrote the ledger, then was killed before its commit line
    logs["a#1"].append(line(3, "seat_turn_admitted", seat="s", epoch=1, stream_seq=3, event_ids=["e3"]))
    logs["b#1"] += [
        line(11, "inbox_fetched", seat="s", epoch=2, stream_seq=3),
        line(
            11.1,
            "turn_trigger_skipped",
            seat="s",
            epoch=2,
            stream_seq=3,
            event_ids=["e3"],
            reason="already_worked",
        ),
        line(11.2, "inbox_acked", seat="s", epoch=2, stream_seq=3, outcome="ack"),
    ]
    counts, done, ledgered = commits_and_acks(history(logs))
    assert ledgered == {"e3"} and {"e1", "e2", "e3"} <= done and "e3" not in counts
    logs["b#1"][-1] = line(11.2, "inbox_acked", seat="s", epoch=2, stream_seq=3, outcome="nak")
    assert commits_and_acks(history(logs))[2] == set()  # not acked: not yet completed


def test_the_schedule_is_a_function_of_the_seed_and_the_round() -> None:
    nodes = ("a", "b", "c")
    first = [schedule_round(7, k, FAULTS, nodes) for k in range(1, 40)]
    assert first == [schedule_round(7, k, FAULTS, nodes) for k in range(1, 40)]
    assert first != [schedule_round(8, k, FAULTS, nodes) for k in range(1, 40)]
    for faults in first:
        victims = [f.victim for f in faults if f.victim]
        assert len(victims) == len(set(victims))  # overlapping faults hit different nodes
        assert sum(f.kind in BROKER_FAULTS for f in faults) <= 1  # the cluster keeps its quorum
    assert {f.kind for faults in first for f in faults} == set(FAULTS)
    assert all(f.kind == "kill" for k in range(1, 10) for f in schedule_round(3, k, ("kill",), nodes))
    with pytest.raises(ValueError, match="choose from"):
        schedule_round(1, 1, ("kill", "meteor"), nodes)
    assert (
        Options(seed=4, faults=("kill",)).rerun(2)
        == 'make chaos ARGS="--seed 4 --only-round 2 --faults kill"'
    )


def test_a_satellite_is_a_victim_like_any_node_and_its_count_is_part_of_the_rerun() -> None:
    assert satellite_names(1) == ("s",) and satellite_names(0) == ()
    assert satellite_names(2) == ("s1", "s2")
    with pytest.raises(ValueError, match="negative"):
        satellite_names(-1)
    nodes = ("a", "b", "c", *satellite_names(1))
    rounds = [schedule_round(7, k, FAULTS, nodes) for k in range(1, 60)]
    hit = {f.kind for faults in rounds for f in faults if f.victim == "s"}
    assert hit and hit <= set(NODE_FAULTS)  # broker faults name no node
    for faults in rounds:
        victims = [f.victim for f in faults if f.victim]
        assert len(victims) == len(set(victims))
    assert Options(seed=4).rerun(2) == 'make chaos ARGS="--seed 4 --only-round 2"'  # the default: 1
    assert (
        Options(seed=4, satellites=0).rerun(2) == 'make chaos ARGS="--seed 4 --only-round 2 --satellites 0"'
    )


def test_a_renew_that_skips_its_compare_and_set_is_reported_with_a_rerunnable_seed(tmp_path: Path) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "sitecustomize.py").write_text(BROKEN_RENEW)
    out = tmp_path / "chaos.json"
    args = [
        sys.executable, "-m", "chaos", "--rounds", "1", "--seed", "11", "--faults", "kill",
        "--node-env", f"PYTHONPATH={broken}", "--quiet-timeout", "5", "--fail-fast", "--out", str(out),
    ]  # fmt: skip
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=280)
    text = done.stdout + done.stderr
    assert done.returncode == 1, text[-4000:]
    assert "VIOLATION: seed 11, round 1" in text, text[-4000:]
    assert "--seed 11 --only-round 1 --faults kill --node-env PYTHONPATH=" in text, text[-4000:]
    assert "violations 0" not in text
    doc = json.loads(out.read_text())
    assert doc["seed"] == 11 and doc["schedule"]["1"] and doc["summary"]["violations"] >= 1
    checks = {c["invariant"]: c for c in doc["rounds"][0]["checks"]}
    assert not checks["no fenced write landed"]["ok"], checks["no fenced write landed"]
    assert any("seat_renewed" in v for v in checks["no fenced write landed"]["violations"])
