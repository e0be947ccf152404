"""The reflect pass's gates, in order (AG-6): each skip is logged ``reflection_skipped{gate, worker,
turn_id}`` by the dispatcher.

``malformed`` (a payload missing a field the gates read), ``no_workers`` (every worker switched
off), ``no_role`` (the seat is not an agent seat of the applied org), ``opted_out``
(``role.learning_enabled`` or ``learning.enabled`` false), ``no_budget`` (the seat or the org is at
its ceiling, CO-37; an unreadable counter does not skip), ``duplicate`` (the work key is among the
last 1 024 this node reflected), ``no_engagement`` (no tool but ``submit_work`` and the turn settled
``done``).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from shared.budgets import Budgets, BudgetUnavailable
from shared.config import Learning, OrgModel, Seat
from shared.turns import PAYLOAD_FIELDS

__all__ = ["DUPLICATE_RING", "GATES", "Gated", "RecentKeys", "enabled_workers", "first_gate"]

DUPLICATE_RING = 1024
"""Work keys a node remembers for the ``duplicate`` gate (AG-6, ours)."""
GATES = ("malformed", "no_workers", "no_role", "opted_out", "no_budget", "duplicate", "no_engagement")
"""The gates, in the order they are asked."""

_NOT_ENGAGING = frozenset({"submit_work"})


class RecentKeys:
    """The last :data:`DUPLICATE_RING` work keys this node reflected, oldest dropped first."""

    def __init__(self, size: int = DUPLICATE_RING) -> None:
        self._order: deque[str] = deque()
        self._seen: set[str] = set()
        self._size = size

    def seen(self, key: str) -> bool:
        """True when ``key`` was added before; else remember it and answer False."""
        if key in self._seen:
            return True
        self._order.append(key)
        self._seen.add(key)
        while len(self._order) > self._size:
            self._seen.discard(self._order.popleft())
        return False


class Gated(Exception):
    """A gate stopped the pass: ``gate`` names it."""

    def __init__(self, gate: str, detail: str = "") -> None:
        super().__init__(f"{gate}: {detail}" if detail else gate)
        self.gate = gate
        self.detail = detail


def enabled_workers(learning: Learning) -> list[str]:
    """The workers the company's ``learning`` block leaves on, in run order."""
    out = []
    if learning.reflect.enabled:
        out.append("episodist")
        if learning.reflect.persist_decider:
            out.append("persist_decider")
    if learning.counterparty.enabled:
        out.append("profiler")
    return out


def _malformed(payload: Any) -> str:
    if not isinstance(payload, dict):
        return "not a JSON object"
    missing = [f for f in PAYLOAD_FIELDS if f not in payload]
    if missing:
        return "missing " + ", ".join(missing)
    if not isinstance(payload["seat"], str) or not payload["seat"] or not isinstance(payload["turn_id"], str):
        return "seat and turn_id must be non-empty strings"
    if not isinstance(payload["tools_called"], list) or not isinstance(payload["senders"], list):
        return "tools_called and senders must be lists"
    return ""


async def first_gate(
    payload: Any, org: OrgModel | None, budgets: Budgets | None, recent: RecentKeys
) -> tuple[Seat, list[str]]:
    """Ask the gates in order; return the seat and the workers to run.

    Raises:
        Gated: the first gate that stops the pass.
    """
    why = _malformed(payload)
    if why:
        raise Gated("malformed", why)
    if org is None:
        raise Gated("no_role", "no company is applied on this node")
    workers = enabled_workers(org.company.learning)
    if not workers:
        raise Gated("no_workers", "learning.reflect and learning.counterparty are off")
    seat = org.seat(payload["seat"])
    if seat is None or seat.kind != "agent":
        raise Gated("no_role", f"{payload['seat']} is not an agent seat of the applied org")
    if not org.company.learning.enabled or seat.role.learning_enabled is False:
        raise Gated(
            "opted_out", "learning.enabled" if not org.company.learning.enabled else "role.learning_enabled"
        )
    if budgets is not None:
        try:
            refusal = await budgets.refusal(seat.agent_id)
        except BudgetUnavailable:
            refusal = None  # an unreadable counter does not skip (AG-6)
        if refusal is not None:
            raise Gated("no_budget", f"{refusal.get('scope')} {refusal.get('period')} ceiling reached")
    work_key = str(payload.get("work_key") or payload["turn_id"])
    if recent.seen(f"{seat.handle}/{work_key}"):
        raise Gated("duplicate", work_key)
    engaged = [t for t in payload["tools_called"] if t not in _NOT_ENGAGING]
    if not engaged and payload["settled_as"] == "done":
        raise Gated("no_engagement", "no tool but submit_work and the turn settled done")
    return seat, workers
