"""The history checker itself, on made-up logs: a sound handover passes, each broken invariant is named."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from tests.support.history import History

T0 = 1_800_000_000.0


def line(at: float, event: str, **fields: Any) -> str:
    stamp = datetime.fromtimestamp(T0 + at, UTC).isoformat().replace("+00:00", "Z")
    return json.dumps({"event": event, "timestamp": stamp, **fields})


def handover() -> dict[str, list[str]]:
    """a holds seat s at epoch 1, acks seq 1, dies; b claims epoch 2 and handles seq 2."""
    return {
        "a#1": [
            line(0, "seat_claimed", seat="s", epoch=1),
            line(1, "seat_renewed", seat="s", epoch=1),
            line(2, "inbox_fetched", seat="s", epoch=1, stream_seq=1),
            line(2.1, "seat_turn_admitted", seat="s", epoch=1, stream_seq=1, event_ids=["e1"]),
            line(2.5, "seat_turn_committed", seat="s", epoch=1, stream_seq=1, event_ids=["e1"]),
            line(2.6, "inbox_acked", seat="s", epoch=1, stream_seq=1, outcome="ack"),
            "not json at all",
        ],
        "b#1": [
            line(9, "seat_claimed", seat="s", epoch=2),
            line(10, "inbox_fetched", seat="s", epoch=2, stream_seq=2),
            line(10.1, "seat_turn_admitted", seat="s", epoch=2, stream_seq=2, event_ids=["e2"]),
            line(10.5, "seat_turn_committed", seat="s", epoch=2, stream_seq=2, event_ids=["e2"]),
            line(10.6, "inbox_acked", seat="s", epoch=2, stream_seq=2, outcome="ack"),
        ],
    }


def history(logs: dict[str, list[str]]) -> History:
    h = History()
    for proc, lines in logs.items():
        h.add(proc, lines)
    return h


def test_a_sound_handover_passes() -> None:
    h = history(handover())
    assert h.violations(accepted={"e1": "s", "e2": "s", "e3": "s"}, pending=["e3"]) == []


def test_a_falling_epoch_is_named() -> None:
    logs = handover()
    logs["c#1"] = [line(20, "seat_claimed", seat="s", epoch=1)]
    found = history(logs).violations()
    assert any("epoch did not rise" in v for v in found)
    assert any("two grants of one epoch" in v for v in found)


def test_acting_under_another_owners_epoch_is_named() -> None:
    logs = handover()
    logs["c#1"] = [line(3, "inbox_fetched", seat="s", epoch=1, stream_seq=5)]
    assert any("another owner's epoch" in v for v in history(logs).violations())
    logs["c#1"] = [line(3, "inbox_fetched", seat="s", epoch=7, stream_seq=5)]
    assert any("nobody was granted" in v for v in history(logs).violations())


def test_a_write_after_the_successor_claimed_is_named() -> None:
    logs = handover()
    logs["a#1"].append(line(12, "inbox_acked", seat="s", epoch=1, stream_seq=2, outcome="ack"))
    found = history(logs).violations()
    assert any("write under a superseded epoch" in v for v in found)
    assert any("acked twice" in v for v in found)


def test_lost_and_twice_handled_events_are_named() -> None:
    logs = handover()
    logs["b#1"].append(line(11, "seat_turn_committed", seat="s", epoch=2, stream_seq=3, event_ids=["e1"]))
    found = history(logs).violations(accepted={"e1": "s", "e9": "s"})
    assert any("event e1 committed 2 times" in v for v in found)
    assert any("e9 for s was never handled" in v for v in found)
    logs = handover()
    logs["b#1"] = logs["b#1"][:-1]  # handled, never acked, not declared pending
    assert any("never acked" in v for v in history(logs).violations(accepted={"e2": "s"}))
