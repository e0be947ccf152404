"""Limits the whole fleet shares (issue 13): credential cooldowns (CO-42, FL-121) and token budgets
(CO-37, FL-119, FL-120), on three nodes over a real 3-member cluster with the scripted model.

- a 429 on node A benches that API key on every node: B learns it from the ``cooldowns`` bucket
  within its 15 s pull and its seats call the next key without trying the benched one;
- an org cap of 5 000 tokens with the offline provider stops at 5 000 in total, not per node: the
  shared counter equals what the turns spent on all three nodes, the refusing turns record
  ``budget_exhausted`` and park their messages, a raised ceiling releases them, and a node restart
  keeps the counters.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest

from tests.fleet.harness import Fleet, company_doc, wait_for
from tests.support.procs import write_yaml

pytestmark = pytest.mark.timeout(300)  # the cap test applies three revisions and restarts a node

KEYS = ["fleet-key-1", "fleet-key-2"]


def base_doc(fleet: Fleet) -> dict[str, Any]:
    """The nine-seat company on the scripted model with two API keys."""
    doc = company_doc(fleet.llm)
    doc["providers"]["llm"]["default"]["api_keys"] = list(KEYS)
    return doc


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    f = Fleet(tmp_path_factory.mktemp("limits"))
    try:
        f.company = write_yaml(f.root / "company.yaml", base_doc(f))
        f.start(f.names[0]).wait_ready(90)
        for name in f.names[1:]:
            f.start(name)
        for node in f.nodes.values():
            node.wait_ready(90)
        f.wait_converged(60)
        yield f
    finally:
        f.stop()


def _stamp(e: dict[str, Any]) -> float:
    return datetime.fromisoformat(e["timestamp"]).timestamp()


def _answered(fleet: Fleet, message_id: str) -> dict[str, Any] | None:
    with fleet.api() as c:
        m = c.get(f"/messages/{message_id}").json()
    return m if m.get("status") in ("answered", "failed") else None


def test_a_key_rate_limited_on_one_node_is_skipped_by_its_peers(fleet: Fleet) -> None:
    owners = fleet.owners()
    seat_a = next(s for s in fleet.seats if owners.get(s) == "a")
    seat_b = next(s for s in fleet.seats if owners.get(s) == "b")
    fleet.llm.rate_limited = {KEYS[0]}
    try:
        first = _answered_after(fleet, seat_a, "the first call meets a 429")
        assert first["status"] == "answered", first
        (benched,) = fleet.events("a", "credential_cooled")
        assert benched["kind"] == "rate_limit" and KEYS[0] not in str(benched)
        learned = wait_for(
            "b learned the bench from the cooldowns bucket",
            lambda: fleet.events("b", "credential_cooled_by_peer"),
            timeout=20,
        )[0]
        assert learned["hint"] == benched["hint"]
        assert _stamp(learned) - _stamp(benched) <= 15 + 1  # one pull interval (and a margin for the log)
        before = len(fleet.llm.requests(seat_b))
        second = _answered_after(fleet, seat_b, "b's seat answered")
        assert second["status"] == "answered", second
        used = {r.authorization for r in fleet.llm.requests(seat_b)[before:]}
        assert used == {f"Bearer {KEYS[1]}"}, used  # never tried the benched key
        assert fleet.events("b", "credential_cooled") == []  # b did not meet the 429 itself
    finally:
        fleet.llm.rate_limited = set()


def _answered_after(fleet: Fleet, seat: str, what: str) -> dict[str, Any]:
    message_id = fleet.message_ids[fleet.post_message(seat, f"limits test for {seat}")]
    return wait_for(what, lambda: _answered(fleet, message_id), timeout=40)


def _activate(fleet: Fleet, doc: dict[str, Any], summary: str) -> int:
    with fleet.api("a") as c:
        r = c.put("/config", json=doc, headers={"X-Summary": summary}, timeout=30)
    assert r.status_code == 201, r.text
    epoch = int(r.json()["epoch"])

    def reached() -> bool:
        nodes = {n["id"]: n for n in fleet.view()["nodes"]}
        return all((nodes.get(n) or {}).get("config_epoch") == epoch for n in fleet.live())

    wait_for(f"every node applied epoch {epoch}", reached, timeout=30)
    return epoch


def _budgets(fleet: Fleet, via: str) -> dict[str, Any]:
    with fleet.api(via) as c:
        r = c.get("/budgets")
    assert r.status_code == 200, r.text
    return dict(r.json())


def _org_day(view: dict[str, Any]) -> dict[str, Any]:
    org = view["scopes"][0]
    assert org["scope"] == "org", view
    return dict(org["windows"]["day"])


def _statuses(fleet: Fleet, ids: list[str]) -> dict[str, str]:
    with fleet.api() as c:
        return {i: c.get(f"/messages/{fleet.message_ids[i]}").json().get("status", "?") for i in ids}


def test_an_org_cap_stops_the_fleet_at_the_cap_in_total_and_a_raise_releases_the_parked(
    fleet: Fleet,
) -> None:
    cap = 5000
    doc = base_doc(fleet)
    doc["providers"]["llm"]["default"] = dict(doc["providers"]["llm"]["offline"])
    doc["token_budget"] = {"day": cap}
    _activate(fleet, doc, "every seat offline, org capped at 5000 tokens a day")
    with fleet.api("a") as c:
        assert c.post("/budgets/reset").status_code == 200  # a rerun starts from zero
        since = c.get("/turns?limit=1").json()["turns"]
    last_before = since[0]["started_at"] if since else 0
    owners = fleet.owners()
    assert {owners[s] for s in fleet.seats} == {"a", "b", "c"}

    sent: dict[str, list[str]] = {seat: [] for seat in fleet.seats}
    for n in range(3):  # more than the cap holds, spread over every seat on every node
        for seat in fleet.seats:
            sent[seat].append(fleet.post_message(seat, f"budget round {n} for {seat}", via=owners[seat]))
    every = [i for ids in sent.values() for i in ids]
    seen: dict[str, str] = {}

    def settled() -> dict[str, str] | None:
        # each seat: its messages answered in order until one is parked; the ones behind a parked
        # message stay queued in its inbox (a parked seat fetches nothing)
        seen.update(_statuses(fleet, every))
        for ids in sent.values():
            order = [seen[i] for i in ids]
            done = order.index("parked") if "parked" in order else len(order)
            if any(v != "answered" for v in order[:done]) or any(v != "queued" for v in order[done + 1 :]):
                return None
            if done == len(order) and "parked" not in order and any(v != "answered" for v in order):
                return None
        return dict(seen)

    try:
        statuses = wait_for("every seat answered its messages or parked", settled, timeout=90)
    except AssertionError as e:
        raise AssertionError(f"{e}; statuses: {seen}") from None
    parked = [i for i, v in statuses.items() if v == "parked"]
    waiting = [i for i, v in statuses.items() if v in ("parked", "queued")]
    assert parked, statuses

    view = _budgets(fleet, "b")
    day = _org_day(view)
    assert day["ceiling"] == cap and day["state"] == "refusing", day
    assert "org" in view["refusing"]
    with fleet.api("c") as c:
        turns = [t for t in c.get("/turns?limit=500").json()["turns"] if t["started_at"] > last_before]
    spent = sum(int(t["input_tokens"]) + int(t["output_tokens"]) for t in turns)
    assert day["spent"] == spent <= cap, (day, spent)  # one budget for the fleet, not one per node
    refused = [t for t in turns if t["error_kind"] == "budget_exhausted"]
    # every node was refused while the fleet's total stayed under the one cap: per-node budgets
    # would have let each node spend up to the cap before refusing anything
    assert {t["node"] for t in refused} == {"a", "b", "c"}, [(t["node"], t["error_kind"]) for t in turns]
    with fleet.api("a") as c:
        record = c.get(f"/turns/{refused[0]['turn_id']}").json()["record"]
    assert record["budget"]["scope"] == "org" and record["budget"]["ceiling"] == cap, record["budget"]
    assert record["budget"]["period"] == "day" and record["budget"]["spent"] <= cap

    # a node restart keeps the counters (they live in the budgets bucket, not in a process)
    fleet.nodes["b"].stop()
    fleet.start("b").wait_ready(90)
    assert _org_day(_budgets(fleet, "b"))["spent"] == day["spent"]
    fleet.wait_converged(60)

    # a raised ceiling releases every parked message, on every node
    doc["token_budget"] = {"day": 10_000_000}
    _activate(fleet, doc, "raise the org ceiling")
    final = wait_for(
        "the parked messages and those queued behind them answered",
        lambda: (st := _statuses(fleet, waiting)) and all(v == "answered" for v in st.values()) and st,
        timeout=120,
    )
    assert set(final) == set(waiting)
    _activate(fleet, base_doc(fleet), "back to the scripted model, no cap")
