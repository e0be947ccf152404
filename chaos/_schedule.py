"""The nemesis's menu and the seeded schedule: which faults each round injects, where, for how long.

Each round's faults come from a generator seeded with ``"<seed>:<round>"`` alone, so round ``K`` of
seed ``S`` is the same whatever ``--rounds`` says, and ``--seed S --only-round K`` replays it on a
fresh fleet. A round has one fault, or two overlapping ones (the second starts while the first is
still in effect) on different nodes.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["FAULTS", "NODE_FAULTS", "Fault", "schedule_round"]

NODE_FAULTS = (
    "kill",
    "pause",
    "drain",
    "cut-short",
    "cut-long",
    "skew-small",
    "skew-large",
)
"""Faults aimed at one node (``victim`` names it)."""

BROKER_FAULTS = ("member", "stream-leader", "kv-leader")
"""Faults aimed at one NATS cluster member (chosen when injected: the leader of a stream, or any)."""

FAULTS = NODE_FAULTS + BROKER_FAULTS
"""Every fault the nemesis knows:

- ``kill``: ``kill -9`` a node, then start it again on its store;
- ``pause``: ``SIGSTOP`` a node past the lease TTL, then ``SIGCONT`` (restarted if its watchdog ended it);
- ``drain``: ``SIGTERM`` a node while one of its seats runs a turn, then start it again;
- ``cut-short`` / ``cut-long``: cut one node off the broker (its proxy) for less / more than the TTL;
- ``skew-small`` / ``skew-large``: run one node with its clock off by ±10 s / ±2 min (libfaketime),
  then start it again on the true clock;
- ``member`` / ``stream-leader`` / ``kv-leader``: ``kill -9`` a NATS member (any one, the leader of a
  log stream, the leader of the lease bucket), then start it again.
"""

MEMBERS = ("n1", "n2", "n3")
"""The cluster members' names (:class:`tests.support.cluster.NatsCluster`)."""
LOG_STREAMS = ("CREWLET_AGENT", "CREWLET_TRACKER_LOG", "CREWLET_PAGES_LOG")
"""Streams whose leader ``stream-leader`` kills: the seats' inboxes and the estate's two logs."""

OVERLAP_CHANCE = 0.3
"""The share of rounds that inject two overlapping faults."""


@dataclass(frozen=True)
class Fault:
    """One scheduled fault.

    Attributes:
        kind: A name of :data:`FAULTS`.
        victim: The node it aims at ("" for a broker fault: the member is found when injected).
        skew: Clock offset in seconds (``skew-*`` only; 0 otherwise).
        target: A broker fault's target: the member (``member``) or the stream whose leader is
            killed (``stream-leader``: a log or the agents' inboxes; ``kv-leader``: the lease bucket).
        delay: Seconds after the round's start at which it is injected.
    """

    kind: str
    victim: str = ""
    skew: int = 0
    target: str = ""
    delay: float = 0.0

    def describe(self) -> str:
        """``kill(b)``, ``skew-large(c, -120 s)``, ``kv-leader``: for tables and logs."""
        parts = (self.victim, self.target, f"{self.skew:+d} s" if self.skew else "")
        inner = ", ".join(x for x in parts if x)
        return f"{self.kind}({inner})" if inner else self.kind

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def schedule_round(seed: int, round_no: int, menu: tuple[str, ...], nodes: tuple[str, ...]) -> list[Fault]:
    """The faults of round ``round_no`` (1-based) under ``seed``, chosen from ``menu``.

    Args:
        seed: The run's seed.
        round_no: The round, from 1.
        menu: The faults allowed in this run (non-empty).
        nodes: The node ids a node fault may aim at.

    Returns:
        One fault, or two overlapping ones on different nodes (the second injected 1–3 s later);
        never two broker faults at once (the cluster keeps a quorum).

    Raises:
        ValueError: ``menu`` is empty or names an unknown fault.
    """
    unknown = [f for f in menu if f not in FAULTS]
    if not menu or unknown:
        raise ValueError(f"faults: {unknown or 'none'} — choose from {', '.join(FAULTS)}")
    rng = random.Random(f"{seed}:{round_no}")
    first = _pick(rng, menu, nodes, used=set())
    faults = [first]
    if rng.random() < OVERLAP_CHANCE:
        used = {first.victim} if first.victim else set()
        second_menu = tuple(f for f in menu if not (f in BROKER_FAULTS and first.kind in BROKER_FAULTS))
        free = tuple(n for n in nodes if n not in used)
        second_menu = tuple(f for f in second_menu if f in BROKER_FAULTS or free)
        if second_menu:
            second = _pick(rng, second_menu, free, used=used)
            faults.append(
                Fault(second.kind, second.victim, second.skew, second.target, round(rng.uniform(1.0, 3.0), 1))
            )
    return faults


def _pick(rng: random.Random, menu: tuple[str, ...], nodes: tuple[str, ...], *, used: set[str]) -> Fault:
    kind = rng.choice(sorted(menu))
    if kind == "member":
        return Fault(kind, target=rng.choice(MEMBERS))
    if kind == "stream-leader":
        return Fault(kind, target=rng.choice(LOG_STREAMS))
    if kind == "kv-leader":
        return Fault(kind, target="KV_crewlet_leases")
    victim = rng.choice(sorted(n for n in nodes if n not in used))
    skew = 0
    if kind == "skew-small":
        skew = rng.choice((-10, 10))
    elif kind == "skew-large":
        skew = rng.choice((-120, 120))
    return Fault(kind, victim, skew)
