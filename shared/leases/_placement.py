"""The placement policy seam of the seat host (FL-56..FL-64 plug in here), and release reasons.

A :class:`PlacementPolicy` decides, once per sweep, which seats this node should claim and which it
should give back. The single-node policy, :class:`ClaimAll`, claims every seat it is given; fair
share (FL-56), placement groups (FL-59) and the claim/release limits per sweep are a policy the
fleet layer supplies without changing the host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

__all__ = ["FENCED_REASONS", "VOLUNTARY_REASONS", "ClaimAll", "PlacementPolicy", "Plan", "ReleaseReason"]

ReleaseReason = Literal[
    "drain", "rebalance", "role_gone", "placement", "lease_lost", "acquire_failed", "posture", "unserviceable"
]
"""Why a seat is given up (fleet.md §26). Voluntary ones let the running handler finish (FL-66);
``unserviceable``: the node cannot reach the estate (FL-63)."""

VOLUNTARY_REASONS: frozenset[str] = frozenset(
    {"drain", "rebalance", "role_gone", "placement", "unserviceable"}
)
FENCED_REASONS: frozenset[str] = frozenset({"lease_lost", "acquire_failed", "posture"})


@dataclass(frozen=True)
class Plan:
    """What a placement policy wants done in one sweep.

    Attributes:
        claim: Handles to claim, in the order to try them (most wanted first, FL-54).
        release: Handles to give back voluntarily, with the reason (``rebalance``/``placement``).
    """

    claim: Sequence[str] = ()
    release: Mapping[str, ReleaseReason] = field(default_factory=dict)


class PlacementPolicy(Protocol):
    """Decides which seats this node should hold (FL-56..FL-64 plug in here)."""

    async def plan(self, seats: Sequence[str], held: Mapping[str, int]) -> Plan:
        """Return this sweep's claims and voluntary releases.

        Args:
            seats: Every agent seat of the active company that this node may run, in org order.
            held: The seats this node holds now → epoch.

        Returns:
            The plan; the host skips claims of seats it holds or is backing off from.
        """
        ...


class ClaimAll:
    """The single-node policy: claim every seat given, give nothing back."""

    async def plan(self, seats: Sequence[str], held: Mapping[str, int]) -> Plan:
        """See :meth:`PlacementPolicy.plan`."""
        return Plan(claim=[h for h in seats if h not in held])
