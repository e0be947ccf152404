"""The invariants checked after every round, as pure functions over what the run recorded.

The first five are the fleet history checker's (:class:`tests.support.history.History`): its
violation lines are sorted into them by :func:`history_checks`. The rest are the run's own:

6. **one completed turn per accepted trigger**: every webhook delivery or API message an ingress
   accepted (202 with an event id) was committed by exactly one turn, or is still pending (and must
   be completed after the final heal). One exception, in 6 and in "handled once" alike: a trigger
   whose ledger write failed may be worked twice — FL-89's documented fail-open — and is reported
   as *excused*, not as a violation. A trigger counts as completed without a commit line when a
   successor skipped its redelivery as ``already_worked`` (the ledger is written after the turn's
   side effects; a ``kill -9`` can land between that write and the log line);
7. **acknowledged writes on every data node**: every tracker item and knowledge page whose write was
   acknowledged is in every data node's own copy;
8. **copies identical at one position**: data nodes at the same applied position of each log hold
   identical content (the estate's ``estate.digest``, ES-1);
9. **no seat unowned past TTL + 2 sweeps**: after the round's last fault is healed, no seat is
   missing from the lease bucket for longer than the TTL plus two placement sweeps (FL-56);
10. **no duplicate work item per trigger**: one tracker item per GitHub basis (``github:<repo>#<n>``)
    and per accepted trigger whose turn creates one (its title is the trigger's unique text).

Every function returns violation lines (empty: the invariant held); :class:`Check` carries them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "HISTORY_INVARIANTS",
    "INVARIANTS",
    "Check",
    "digest_violations",
    "duplicate_violations",
    "estate_violations",
    "excused_by_fl89",
    "history_checks",
    "turn_violations",
    "unowned_violations",
]

HISTORY_INVARIANTS = {
    "epochs rise": ("epoch did not rise", "grant without seat or epoch"),
    "one owner per epoch": ("two grants of one epoch", "acted under"),
    "no fenced write landed": ("write under a superseded epoch",),
    "handled once": ("committed", "never handled", "handled by another seat", "never acked"),
    "acked once": ("acked twice",),
}
"""Invariant → the phrases of :meth:`History.violations` lines that break it (first match wins)."""

INVARIANTS = (
    *HISTORY_INVARIANTS,
    "one completed turn per accepted trigger",
    "acknowledged writes on every data node",
    "copies identical at one position",
    "no seat unowned past TTL + 2 sweeps",
    "no duplicate work item per trigger",
)
"""Every invariant, in table order."""


@dataclass
class Check:
    """One invariant's verdict for a round.

    Attributes:
        name: A name of :data:`INVARIANTS`.
        violations: One line per violation (empty: held).
        note: What was checked (counts), or why it could not be (then ``violations`` says so too).
    """

    name: str
    violations: list[str] = field(default_factory=list)
    note: str = ""

    @property
    def ok(self) -> bool:
        return not self.violations

    def to_json(self) -> dict[str, Any]:
        return {"invariant": self.name, "ok": self.ok, "violations": self.violations, "note": self.note}


def history_checks(lines: Iterable[str]) -> list[Check]:
    """Sort the history checker's violation ``lines`` into its five invariants.

    A line no phrase matches is put under "handled once" (the checker's catch-all) rather than dropped.
    """
    checks = {name: Check(name) for name in HISTORY_INVARIANTS}
    for line in lines:
        name = next(
            (n for n, phrases in HISTORY_INVARIANTS.items() if any(p in line for p in phrases)),
            "handled once",
        )
        checks[name].violations.append(line)
    return list(checks.values())


def excused_by_fl89(lines: Iterable[str], ledger_failed: Iterable[str]) -> tuple[list[str], list[str]]:
    """Split history lines into (violations, excused): an event committed twice whose ledger read or
    write failed is FL-89's documented fail-open ("the trigger is worked (possibly twice), never
    parked").

    Args:
        lines: :meth:`History.violations` lines.
        ledger_failed: Event ids named by a ``ledger_write_failed`` line (its ``key``) or a
            ``ledger_read_failed`` line (its ``keys``).
    """
    failed = set(ledger_failed)
    kept: list[str] = []
    excused: list[str] = []
    for line in lines:
        words = line.split()
        twice = len(words) > 3 and words[0] == "event" and words[2] == "committed"
        (excused if twice and words[1] in failed else kept).append(line)
    return kept, excused


def turn_violations(
    accepted: Mapping[str, str],
    commits: Mapping[str, int],
    pending: Iterable[str] = (),
    ledger_failed: Iterable[str] = (),
) -> list[str]:
    """Invariant 6.

    Args:
        accepted: Event id → seat, every trigger an ingress accepted.
        commits: Event id → how many ``seat_turn_committed`` lines name it.
        pending: Event ids allowed to be not yet completed (still in their inbox).
        ledger_failed: Event ids whose ledger write failed: worked more than once is FL-89's
            fail-open, not a violation (see :func:`excused_by_fl89`).
    """
    waiting = set(pending)
    failed = set(ledger_failed)
    out = []
    for event_id, seat in sorted(accepted.items()):
        n = commits.get(event_id, 0)
        if n > 1 and event_id not in failed:
            out.append(f"trigger {event_id} for {seat} completed {n} turns")
        elif n == 0 and event_id not in waiting:
            out.append(f"trigger {event_id} for {seat} was accepted and never completed")
    return out


def estate_violations(acked: Iterable[str], present: Mapping[str, Iterable[str]]) -> list[str]:
    """Invariant 7.

    Args:
        acked: Every acknowledged write's object (``item:SUP-3``, ``page:<id>``).
        present: Data node → the objects of ``acked`` its own copy holds.
    """
    want = set(acked)
    out = []
    for node, have in sorted(present.items()):
        missing = sorted(want - set(have))
        if missing:
            shown = ", ".join(missing[:8]) + (f" and {len(missing) - 8} more" if len(missing) > 8 else "")
            out.append(f"node {node} lacks {len(missing)} acknowledged write(s): {shown}")
    return out


def digest_violations(copies: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Invariant 8.

    Args:
        copies: Data node → ``{"position": [applied per log], "sha256": digest}``, read while the
            node's positions stood still.

    Returns:
        A violation when two nodes at the same position hold different digests. Copies at different
        positions are not compared (the caller waits until they level, and says so when they never do).
    """
    by_position: dict[tuple[Any, ...], dict[str, str]] = {}
    for node, copy in copies.items():
        by_position.setdefault(tuple(copy["position"]), {})[node] = str(copy["sha256"])
    out = []
    for position, digests in sorted(by_position.items(), key=lambda kv: str(kv[0])):
        if len(set(digests.values())) > 1:
            shown = ", ".join(f"{n}={d[:12]}" for n, d in sorted(digests.items()))
            out.append(f"copies at position {list(position)} differ: {shown}")
    return out


def unowned_violations(
    samples: Iterable[tuple[float, Iterable[str]]], healed_at: float, limit: float
) -> list[str]:
    """Invariant 9: no seat stays unowned for longer than ``limit`` seconds after the heal.

    Each seat's unowned stretch runs from the first sample that misses it to the first sample that
    names it again (or the last sample). A stretch counts from ``max(its start, healed_at)``; one
    longer than ``limit`` is a violation. A brief handover gap later on (a rebalance releasing a
    seat a moment before a peer claims it) is not.

    Args:
        samples: ``(wall time, seats the lease bucket did not name)`` as the monitor read them.
        healed_at: Wall time the round's last fault was healed.
        limit: Seconds a seat may stay unowned after that (TTL + two sweeps).
    """
    ordered = sorted((at, set(seats)) for at, seats in samples)
    out = []
    for seat in sorted(set().union(*(seats for _, seats in ordered)) if ordered else ()):
        start: float | None = None
        for at, seats in [*ordered, (float("inf"), set())]:
            if seat in seats and start is None:
                start = at
            elif seat not in seats and start is not None:
                end = at if at != float("inf") else ordered[-1][0]
                if end - max(start, healed_at) > limit:
                    out.append(
                        f"seat {seat} unowned for {end - max(start, healed_at):.1f} s after the heal "
                        f"(limit {limit:.0f} s; unowned since {start - healed_at:+.1f} s)"
                    )
                start = None
    return out


def duplicate_violations(items: Iterable[Mapping[str, Any]], trigger_titles: Iterable[str]) -> list[str]:
    """Invariant 10.

    Args:
        items: Tracker items (``key``, ``title``, ``external``: the GitHub basis or None).
        trigger_titles: The unique texts of accepted triggers whose turn creates an item.
    """
    rows = list(items)
    titles = set(trigger_titles)
    out = []
    bases = Counter(str(i["external"]) for i in rows if i.get("external"))
    for basis, n in sorted(bases.items()):
        if n > 1:
            keys = [str(i["key"]) for i in rows if str(i.get("external")) == basis]
            out.append(f"{n} work items for basis {basis}: {', '.join(keys)}")
    named = Counter(str(i["title"]) for i in rows if str(i.get("title")) in titles)
    for title, n in sorted(named.items()):
        if n > 1:
            keys = [str(i["key"]) for i in rows if i.get("title") == title]
            out.append(f"{n} work items for one trigger {title!r}: {', '.join(keys)}")
    return out
