"""Posture: what a node does while its applied config epoch lags the fleet's (FL-111..FL-113).

:func:`posture` is the FL-111 table as one pure function; :class:`PostureTracker` keeps the facts it
reads between reconcile ticks (ticks behind, this epoch's failures and attempts). Postures:

- ``serve``: applied ≥ target;
- ``wait``: behind, lag not confirmed (or confirmed while nobody has reported at all);
- ``shed``: lag confirmed and a fresh peer applied the target: this node is the odd one out; it
  releases its seats fenced (reason ``posture``) and refuses new work (FL-113);
- ``stuck``: as ``shed`` once this epoch's retry budget (3 attempts) is spent: no more re-applies
  until a new epoch (FL-111: the bound is unconditional);
- ``isolated``: lag confirmed and no peer applied the target while some peer reported or this node
  failed it: the revision itself is bad, so the node keeps serving its previous epoch.

Lag is *confirmed* when this node recorded a failure for the target epoch or has been behind for
more than 3 ticks (≈45 s at the default interval). A single node reaches ``isolated``, never
``stuck``: it has no peer that applied the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["MAX_ATTEMPTS", "Posture", "PostureTracker", "posture"]

Posture = Literal["serve", "wait", "shed", "stuck", "isolated"]
MAX_ATTEMPTS = 3
"""Apply attempts per epoch before ``shed`` becomes ``stuck`` (FL-111)."""
CONFIRM_TICKS = 3
"""Ticks behind after which lag counts as confirmed without a failure (FL-111)."""


def posture(
    *,
    applied: int,
    target: int,
    failed: bool,
    ticks_behind: int,
    peer_applied: bool,
    peers_reported: bool,
    attempts: int,
) -> Posture:
    """The FL-111 table.

    Args:
        applied: The epoch this node applied (0: none).
        target: The fleet's epoch (the pointer's KV revision; 0: none).
        failed: This node recorded a failure applying ``target``.
        ticks_behind: Consecutive reconcile ticks with ``applied < target``.
        peer_applied: Some peer's fresh status (within 4 intervals) reports ``target`` applied ``ok``.
        peers_reported: Some peer has a fresh status at all.
        attempts: Apply attempts spent on ``target``.

    Returns:
        The posture.
    """
    if applied >= target:
        return "serve"
    confirmed = failed or ticks_behind > CONFIRM_TICKS
    if not confirmed:
        return "wait"
    if peer_applied:
        return "stuck" if attempts >= MAX_ATTEMPTS else "shed"
    if peers_reported or failed:
        return "isolated"
    return "wait"


@dataclass
class PostureTracker:
    """The per-epoch facts :func:`posture` reads, kept across ticks (FL-111).

    Attributes:
        target: The epoch the facts are about; a new target resets them.
        attempts: Apply attempts spent on ``target``.
        failed: True once an attempt on ``target`` failed.
        ticks_behind: Consecutive ticks with the applied epoch below ``target``.
        error: The last failure's text.
    """

    target: int = 0
    attempts: int = 0
    failed: bool = False
    ticks_behind: int = 0
    error: str = ""

    def retarget(self, target: int) -> None:
        """Reset the facts when the fleet's epoch moves (the retry budget resets with a new epoch)."""
        if target != self.target:
            self.target, self.attempts, self.failed, self.error = target, 0, False, ""

    def may_attempt(self) -> bool:
        """True while this epoch's retry budget is not spent (no re-apply after 3, FL-111)."""
        return self.attempts < MAX_ATTEMPTS

    def tick(self, applied: int) -> None:
        """Count one reconcile tick: behind or level."""
        self.ticks_behind = self.ticks_behind + 1 if applied < self.target else 0
