"""A fleet's recorded history, read back from every node process's JSON log, and its invariants.

Fleet tests (DESIGN.md "Tests and benchmarks") run several node processes, inject faults, and
then check what every process said it did. Each process (each *incarnation*: a node restarted
under the same id is a new process with a new owner string, FL-10) is one labelled log. The lines
the checker reads, all carrying the node id (``node``) and a UTC ``timestamp``:

========================  ==========================================================  =========
event                     what it records                                             level
========================  ==========================================================  =========
``seat_claimed``          a lease grant: ``seat``, ``epoch``                           info
``seat_renewed``          a successful renew (compare-and-set): ``seat``, ``epoch``    debug
``seat_released``         a release: ``seat``, ``epoch``, ``reason``                   info
``seat_lost``             a renew said no, or a full TTL without a good renew          warning
``inbox_fetched``         a delivery fetched: ``seat``, ``epoch``, ``stream_seq``      debug
``inbox_acked``           an ack/NAK/term the broker confirmed: ``outcome``            debug
``seat_turn_admitted``    a turn admitted: ``turn_id``, ``stream_seq``, ``event_ids``  info
``seat_turn_committed``   ledger written after the turn: same ids, ``outcome``         info
``turn_trigger_skipped``  the ledger said done: ``event_ids``, ``stream_seq``          info
========================  ==========================================================  =========

Invariants (:meth:`History.violations`):

1. **Epochs only rise** per seat: grants ordered by time carry strictly rising epochs (the same
   process may log one epoch twice: it adopted its own unbroken hold, FL-50).
2. **One owner per epoch**: every line naming ``(seat, epoch)`` comes from the one process that
   was granted it, and nobody acts under an epoch nobody was granted.
3. **No fenced write landed**: no renew, admission, ledger commit or ack under ``(seat, e)`` is
   logged after a higher epoch of that seat was granted. The timestamps are wall-clock times of
   one machine's processes; a write is logged after its reply came back, and the lease fences
   leave a margin of the TTL's slack (``SeatHost.holds``) before a successor can win the key.
4. **Handled once**: no trigger constituent is committed twice (one completed turn per event, the
   ledger's promise); every accepted event is committed exactly once, or is declared still
   pending; a committed delivery was acked by somebody (unless declared pending).
5. **Acked once**: no stream sequence of a seat's inbox is acked (or terminated) twice.

Needs ``logging: {level: debug}`` in the node files for the renew, fetch and ack lines.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["Event", "History"]

_ACTS = {
    "seat_renewed",
    "seat_released",
    "seat_lost",
    "inbox_attached",
    "inbox_detached",
    "inbox_fetched",
    "inbox_acked",
    "inbox_deferred",
    "inbox_ack_fenced",
    "seat_turn_admitted",
    "seat_turn_committed",
    "turn_trigger_skipped",
}
"""Lines that act under a seat's epoch (checked against the grant)."""

_WRITES = {"seat_renewed", "seat_turn_admitted", "seat_turn_committed", "inbox_acked"}
"""Lines that record something landing (or a turn starting) under an epoch."""


@dataclass(frozen=True)
class Event:
    """One log line of one process.

    Attributes:
        proc: The process label (``a#2``: node ``a``, second incarnation).
        name: The event name.
        at: Seconds since the epoch (UTC wall clock).
        fields: The whole parsed line.
    """

    proc: str
    name: str
    at: float
    fields: Mapping[str, Any]

    @property
    def seat(self) -> str | None:
        seat = self.fields.get("seat")
        return seat if isinstance(seat, str) else None

    @property
    def epoch(self) -> int | None:
        epoch = self.fields.get("epoch")
        return epoch if isinstance(epoch, int) else None

    def describe(self) -> str:
        """``name(seat=…, epoch=…) by proc at HH:MM:SS.ffffff``, for violation messages."""
        keys = ("seat", "epoch", "stream_seq", "turn_id", "event_ids", "outcome", "reason")
        shown = ", ".join(f"{k}={self.fields[k]}" for k in keys if k in self.fields)
        clock = datetime.fromtimestamp(self.at).strftime("%H:%M:%S.%f")
        return f"{self.name}({shown}) by {self.proc} at {clock}"


def _parse(proc: str, lines: Iterable[str]) -> list[Event]:
    out = []
    for line in lines:
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
            at = datetime.fromisoformat(str(data["timestamp"])).timestamp()
            if isinstance(data.get("sent_wall"), int | float):
                # a renew counts from when it was sent: a successful compare-and-set landed before
                # any successor could win the key, however late a frozen process logged the reply
                at = float(data["sent_wall"])
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(data.get("event"), str):
            out.append(Event(proc, data["event"], at, data))
    return out


@dataclass
class History:
    """The events of every process of a fleet run, in time order."""

    events: list[Event] = field(default_factory=list)

    @classmethod
    def from_logs(cls, logs: Mapping[str, Path]) -> History:
        """Read every labelled log file (label → path; one per process incarnation)."""
        h = cls()
        for proc, path in logs.items():
            h.add(proc, path.read_text(errors="replace").splitlines())
        return h

    def add(self, proc: str, lines: Iterable[str]) -> None:
        """Add one process's log lines."""
        self.events += _parse(proc, lines)
        self.events.sort(key=lambda e: e.at)

    def named(self, *names: str) -> list[Event]:
        """The events with one of ``names``, in time order."""
        return [e for e in self.events if e.name in names]

    def grants(self) -> dict[tuple[str, int], Event]:
        """``(seat, epoch)`` → the first ``seat_claimed`` line of that grant."""
        out: dict[tuple[str, int], Event] = {}
        for e in self.named("seat_claimed"):
            if e.seat is not None and e.epoch is not None:
                out.setdefault((e.seat, e.epoch), e)
        return out

    def violations(
        self, *, accepted: Mapping[str, str] | None = None, pending: Iterable[str] = ()
    ) -> list[str]:
        """Check the invariants of the module docstring.

        Args:
            accepted: Event id → seat, for every trigger the fleet accepted (an ingress 202).
            pending: Accepted event ids the caller knows are still in their inbox.

        Returns:
            One readable line per violation; empty when the history is sound.
        """
        out: list[str] = []
        out += self._epochs_rise()
        out += self._one_owner_per_epoch()
        out += self._no_fenced_write()
        out += self._handled_once(dict(accepted or {}), set(pending))
        out += self._acked_once()
        return out

    def assert_sound(self, *, accepted: Mapping[str, str] | None = None, pending: Iterable[str] = ()) -> None:
        """Raise ``AssertionError`` listing every violation (the first 40)."""
        found = self.violations(accepted=accepted, pending=pending)
        if found:
            more = f"\n... and {len(found) - 40} more" if len(found) > 40 else ""
            raise AssertionError("history violations:\n" + "\n".join(found[:40]) + more)

    # -- the invariants ----------------------------------------------------------------------

    def _epochs_rise(self) -> list[str]:
        out = []
        last: dict[str, Event] = {}
        for e in self.named("seat_claimed"):
            if e.seat is None or e.epoch is None:
                out.append(f"grant without seat or epoch: {e.describe()}")
                continue
            prev = last.get(e.seat)
            if prev is not None and prev.epoch is not None:
                same = e.epoch == prev.epoch and e.proc == prev.proc
                if e.epoch <= prev.epoch and not same:
                    out.append(f"seat {e.seat}: epoch did not rise: {prev.describe()} then {e.describe()}")
            last[e.seat] = e
        return out

    def _one_owner_per_epoch(self) -> list[str]:
        out = []
        grants = self.grants()
        for e in self.named("seat_claimed"):
            first = grants.get((e.seat, e.epoch)) if e.seat and e.epoch is not None else None
            if first is not None and first.proc != e.proc:
                out.append(f"two grants of one epoch: {first.describe()} and {e.describe()}")
        for e in self.events:
            if e.name not in _ACTS or e.seat is None or e.epoch is None:
                continue
            grant = grants.get((e.seat, e.epoch))
            if grant is None:
                out.append(f"acted under an epoch nobody was granted: {e.describe()}")
            elif grant.proc != e.proc:
                out.append(f"acted under another owner's epoch ({grant.proc}'s): {e.describe()}")
        return out

    def _no_fenced_write(self) -> list[str]:
        out = []
        successor: dict[tuple[str, int], Event] = {}
        by_seat: dict[str, list[Event]] = defaultdict(list)
        for (seat, _), g in sorted(self.grants().items(), key=lambda kv: kv[0][1]):
            by_seat[seat].append(g)
        for seat, grants in by_seat.items():
            for g in grants:
                later = [
                    h for h in grants if h.epoch is not None and g.epoch is not None and h.epoch > g.epoch
                ]
                if later:
                    successor[(seat, g.epoch or 0)] = min(later, key=lambda h: h.at)
        for e in self.events:
            if e.name not in _WRITES or e.seat is None or e.epoch is None:
                continue
            nxt = successor.get((e.seat, e.epoch))
            if nxt is not None and e.at > nxt.at:
                out.append(f"write under a superseded epoch: {e.describe()} after {nxt.describe()}")
        return out

    def _handled_once(self, accepted: dict[str, str], pending: set[str]) -> list[str]:
        out = []
        commits: dict[str, list[Event]] = defaultdict(list)
        for e in self.named("seat_turn_committed"):
            for event_id in e.fields.get("event_ids") or []:
                commits[str(event_id)].append(e)
        for event_id, done in commits.items():
            if len(done) > 1:
                out.append(
                    f"event {event_id} committed {len(done)} times: " + "; ".join(c.describe() for c in done)
                )
        acked = {
            (e.seat, e.fields.get("stream_seq"))
            for e in self.named("inbox_acked")
            if e.fields.get("outcome") in ("ack", "term")
        }
        for event_id, seat in accepted.items():
            done = commits.get(event_id, [])
            if event_id in pending:
                continue
            if not done:
                out.append(f"accepted event {event_id} for {seat} was never handled and is not pending")
                continue
            if done[0].seat != seat:
                out.append(
                    f"accepted event {event_id} for {seat} was handled by another seat: {done[0].describe()}"
                )
            if (done[0].seat, done[0].fields.get("stream_seq")) not in acked:
                out.append(
                    f"accepted event {event_id} was handled but its delivery never acked: {done[0].describe()}"
                )
        return out

    def _acked_once(self) -> list[str]:
        out = []
        seen: dict[tuple[str | None, Any], Event] = {}
        for e in self.named("inbox_acked"):
            if e.fields.get("outcome") not in ("ack", "term"):
                continue
            key = (e.seat, e.fields.get("stream_seq"))
            if key in seen:
                out.append(f"delivery acked twice: {seen[key].describe()} and {e.describe()}")
            else:
                seen[key] = e
        return out
