"""FL-111's posture table, row by row, and the tracker's retry budget."""

from __future__ import annotations

import pytest

from shared.control import MAX_ATTEMPTS, PostureTracker, posture

# (applied, target, own failure, ticks behind, a fresh peer applied it, any peer reported, attempts) → posture
ROWS = [
    # applied ≥ target: serve, whatever else is true
    (5, 5, False, 0, False, False, 0, "serve"),
    (6, 5, True, 9, True, True, 3, "serve"),
    (0, 0, False, 0, False, False, 0, "serve"),
    # behind, lag not confirmed (no failure, ≤ 3 ticks): wait
    (4, 5, False, 0, True, True, 1, "wait"),
    (4, 5, False, 3, True, True, 1, "wait"),
    # confirmed by a failure, a peer applied it: shed, then stuck once 3 attempts are spent
    (4, 5, True, 0, True, True, 1, "shed"),
    (4, 5, True, 1, True, True, 2, "shed"),
    (4, 5, True, 2, True, True, 3, "stuck"),
    # confirmed by time (> 3 ticks), a peer applied it
    (4, 5, False, 4, True, True, 1, "shed"),
    (4, 5, False, 4, True, True, MAX_ATTEMPTS, "stuck"),
    # confirmed, nobody applied it, but a peer reported or this node failed: the revision is bad
    (4, 5, True, 0, False, True, 1, "isolated"),
    (4, 5, False, 5, False, True, 1, "isolated"),
    (4, 5, True, 0, False, False, 3, "isolated"),  # a single node fails: isolated, never stuck
    # confirmed by time, nobody reported at all and no failure here: wait
    (4, 5, False, 5, False, False, 1, "wait"),
]


@pytest.mark.parametrize(
    ("applied", "target", "failed", "ticks", "peer_ok", "peers", "attempts", "want"), ROWS
)
def test_posture_table(
    applied: int, target: int, failed: bool, ticks: int, peer_ok: bool, peers: bool, attempts: int, want: str
) -> None:
    got = posture(
        applied=applied,
        target=target,
        failed=failed,
        ticks_behind=ticks,
        peer_applied=peer_ok,
        peers_reported=peers,
        attempts=attempts,
    )
    assert got == want


def test_retry_budget_is_per_epoch() -> None:
    t = PostureTracker()
    t.retarget(7)
    for _ in range(MAX_ATTEMPTS):
        assert t.may_attempt()
        t.attempts += 1
    t.failed = True
    assert not t.may_attempt()  # no re-apply after 3 (FL-111)
    t.retarget(7)
    assert not t.may_attempt() and t.failed  # the same epoch keeps its spent budget
    t.retarget(8)
    assert t.may_attempt() and not t.failed and t.attempts == 0  # a new epoch resets it


def test_ticks_behind_count_and_reset() -> None:
    t = PostureTracker()
    t.retarget(3)
    for n in range(1, 5):
        t.tick(applied=2)
        assert t.ticks_behind == n
    t.tick(applied=3)
    assert t.ticks_behind == 0
