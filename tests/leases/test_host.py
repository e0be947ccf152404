"""SeatHost on real NATS KV: hooks, admission, fences, renew outcomes, undead seats (FL-53..FL-74)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import structlog

from shared.coordination import Coordination
from shared.leases import SeatHost, SeatLeases
from shared.runtime import PROTOCOL_VERSION
from tests.coordination.wrappers import Switchable

from .conftest import TTL, Clock

LAPSE = TTL.total_seconds() + 0.6


class Hooks:
    """Records every hook call; ``fail_release`` makes the next N release hooks raise."""

    def __init__(self, host_ref: list[SeatHost] | None = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail_acquire = False
        self.fail_release = 0
        self.host_ref = host_ref or []
        self.during_release: list[tuple[bool, bool]] = []

    async def on_acquire(self, handle: str, epoch: int) -> None:
        self.calls.append(("acquire", handle, epoch))
        if self.fail_acquire:
            raise RuntimeError("mcp command not found")

    async def on_release(self, handle: str, reason: str) -> None:
        self.calls.append(("release", handle, reason))
        if self.host_ref:
            host = self.host_ref[0]
            epoch = self.calls[0][2]
            self.during_release.append((host.holds(handle, epoch), host.may_continue(handle, epoch)))
        if self.fail_release > 0:
            self.fail_release -= 1
            raise RuntimeError("teardown failed")

    async def on_quiesce(self, handle: str) -> None:
        self.calls.append(("quiesce", handle))

    async def on_resume(self, handle: str, epoch: int) -> None:
        self.calls.append(("resume", handle, epoch))


def host(coord: Coordination, node: str, hooks: Hooks | None = None, clock: Clock | None = None) -> SeatHost:
    hooks = hooks or Hooks()
    kwargs: dict[str, Any] = {"clock": clock} if clock is not None else {}
    h = SeatHost(
        coord,
        node_id=node,
        owner=f"{node}:0000abcd",
        protocol=PROTOCOL_VERSION,
        ttl=TTL,
        on_acquire=hooks.on_acquire,
        on_release=hooks.on_release,
        on_quiesce=hooks.on_quiesce,
        on_resume=hooks.on_resume,
        **kwargs,
    )
    hooks.host_ref.append(h)
    return h


def peer(coord: Coordination) -> SeatLeases:
    return SeatLeases(coord, node_id="peer", owner="peer:11111111", protocol=PROTOCOL_VERSION, ttl=TTL)


async def test_claim_runs_the_acquire_hook_and_admits(kv: Coordination) -> None:
    hooks = Hooks()
    a = host(kv, "n1", hooks)
    with structlog.testing.capture_logs() as logs:
        epoch = await a.claim("triage")
    assert epoch is not None and epoch >= 1
    assert hooks.calls == [("acquire", "triage", epoch)]
    assert a.held() == {"triage": epoch}
    assert a.may_start("triage") == epoch and a.may_continue("triage", epoch) and a.holds("triage", epoch)
    assert not a.may_continue("triage", epoch - 1) and not a.holds("triage", epoch + 1)
    assert await a.claim("triage") == epoch  # already held: no second grant, no second hook
    assert hooks.calls == [("acquire", "triage", epoch)]
    assert {"event": "seat_claimed", "seat": "triage", "epoch": epoch} in [
        {k: e[k] for k in ("event", "seat", "epoch") if k in e} for e in logs
    ]


async def test_voluntary_release_keeps_the_fence_while_the_hook_runs(kv: Coordination) -> None:
    hooks = Hooks()
    a = host(kv, "n1", hooks)
    epoch = await a.claim("triage")
    assert epoch is not None
    with structlog.testing.capture_logs() as logs:
        await a.release("triage", "drain")
    assert hooks.during_release == [(True, True)]  # the running turn may still ack
    assert a.held() == {} and a.may_start("triage") is None and not a.holds("triage", epoch)
    assert await a.leases.read("triage") is None
    assert any(e["event"] == "seat_released" and e["reason"] == "drain" for e in logs)
    assert (await peer(kv).acquire("triage")) is not None


async def test_fenced_release_trips_the_fence_before_the_hook(kv: Coordination) -> None:
    hooks = Hooks()
    a = host(kv, "n1", hooks)
    assert await a.claim("triage") is not None
    await a.release("triage", "posture")
    assert hooks.during_release == [(False, False)]  # acks and NAKs of this tenure are refused
    assert await a.leases.read("triage") is None


async def test_admission_turns_false_when_renewals_stop(kv: Coordination, clock: Clock) -> None:
    """FL-72 accept: may_start turns false within one heartbeat although the seat is held."""
    a = host(kv, "n1", clock=clock)
    epoch = await a.claim("triage")
    assert epoch is not None
    clock.advance(a.heartbeat * 0.9)
    assert a.may_start("triage") == epoch
    clock.advance(a.heartbeat * 0.2)
    assert a.may_start("triage") is None and not a.may_continue("triage", epoch)
    assert a.held() == {"triage": epoch} and a.holds("triage", epoch)
    assert (await a.renew_all()) == {"triage": True}
    assert a.may_start("triage") == epoch


async def test_a_lost_lease_is_reported_and_fenced(kv: Coordination) -> None:
    hooks = Hooks()
    a = host(kv, "n1", hooks)
    epoch = await a.claim("triage")
    assert epoch is not None
    await asyncio.sleep(LAPSE)  # renewals blocked: the lease lapses
    taken = await peer(kv).acquire("triage")
    assert taken is not None and taken.epoch == epoch + 1
    with structlog.testing.capture_logs() as logs:
        assert await a.renew_all() == {"triage": False}
    assert ("release", "triage", "lease_lost") in hooks.calls
    assert a.held() == {} and not a.may_continue("triage", epoch) and not a.holds("triage", epoch)
    lost = [e for e in logs if e["event"] == "seat_lost"]
    assert lost and lost[0]["seat"] == "triage" and lost[0]["epoch"] == epoch
    assert await a.claim("triage") is None  # the peer holds it now


async def test_an_unknown_renew_quiesces_then_resumes(kv: Coordination) -> None:
    """FL-53/FL-73: a store blip keeps the seat, admits nothing new, and the next good renew resumes."""
    store = Switchable(kv)
    hooks = Hooks()
    a = host(store, "n1", hooks)
    epoch = await a.claim("triage")
    assert epoch is not None
    store.broken = True
    assert await a.renew_all() == {"triage": None}
    assert a.held() == {"triage": epoch} and a.may_start("triage") is None
    assert ("quiesce", "triage") in hooks.calls and not any(c[0] == "release" for c in hooks.calls)
    store.broken = False
    assert await a.renew_all() == {"triage": True}
    assert hooks.calls[-1] == ("resume", "triage", epoch)
    assert a.may_start("triage") == epoch


async def test_an_outage_longer_than_the_ttl_releases_fenced(kv: Coordination, clock: Clock) -> None:
    store = Switchable(kv)
    hooks = Hooks()
    a = host(store, "n1", hooks, clock)
    epoch = await a.claim("triage")
    assert epoch is not None
    store.broken = True
    for _ in range(2):
        clock.advance(a.heartbeat)
        assert await a.renew_all() == {"triage": None}
        assert a.held() == {"triage": epoch}
    clock.advance(a.heartbeat + 1e-3)  # past the TTL: 3 x (TTL/3) can round to a hair under it
    assert await a.renew_all() == {"triage": None}
    assert a.held() == {} and ("release", "triage", "lease_lost") in hooks.calls


async def test_a_failed_acquire_hook_releases_fenced_and_backs_off(kv: Coordination, clock: Clock) -> None:
    """FL-55: released fenced (acquire_failed), a peer gets a clear run, no retry here for one TTL."""
    hooks = Hooks()
    hooks.fail_acquire = True
    a = host(kv, "n1", hooks, clock)
    assert await a.claim("triage") is None
    assert ("release", "triage", "acquire_failed") in hooks.calls
    assert await a.leases.read("triage") is None
    hooks.fail_acquire = False
    clock.advance(TTL.total_seconds() * 0.9)
    assert await a.claim("triage") is None and sum(c[0] == "acquire" for c in hooks.calls) == 1
    clock.advance(TTL.total_seconds() * 0.2)
    assert await a.claim("triage") is not None


async def test_an_undead_seat_keeps_its_lease_until_teardown_succeeds(kv: Coordination) -> None:
    """FL-68 accept: a hook failing twice then succeeding releases on the third heartbeat; no peer between."""
    hooks = Hooks()
    hooks.fail_release = 2
    a = host(kv, "n1", hooks)
    epoch = await a.claim("triage")
    assert epoch is not None
    await a.release("triage", "drain")  # fails: undead
    assert a.held() == {} and a.may_start("triage") is None
    assert set(a.health()["unproven_seconds"]) == {"triage"}
    for _ in range(2):  # longer than the TTL in all: the lease is renewed for the undead seat
        await asyncio.sleep(TTL.total_seconds() * 0.6)
        assert await peer(kv).acquire("triage") is None
        await a.renew_all()
    assert a.health()["unproven_seconds"] == {}
    assert [c for c in hooks.calls if c[0] == "release"] == [("release", "triage", "drain")] * 3
    grant = await peer(kv).acquire("triage")
    assert grant is not None and grant.epoch == epoch + 1


async def test_a_seat_lost_while_its_acquire_hook_runs_is_torn_down(kv: Coordination) -> None:
    calls: list[tuple[str, str]] = []
    a: list[SeatHost] = []

    async def on_acquire(handle: str, epoch: int) -> None:
        await a[0].release(handle, "posture")  # the fence trips while the hook is still building

    async def on_release(handle: str, reason: str) -> None:
        calls.append((handle, reason))

    a.append(
        SeatHost(
            kv,
            node_id="n1",
            owner="n1:00000001",
            protocol=PROTOCOL_VERSION,
            ttl=TTL,
            on_acquire=on_acquire,
            on_release=on_release,
        )
    )
    assert await a[0].claim("triage") is None
    assert calls == [("triage", "posture"), ("triage", "lease_lost")]


async def test_sweep_claims_every_assigned_seat_and_releases_removed_ones(kv: Coordination) -> None:
    hooks = Hooks()
    a = host(kv, "n1", hooks)
    a.assign(["triage", "eng-lead", "writer"])
    result = await a.sweep()
    assert set(result) == {"triage", "eng-lead", "writer"} and all(result.values())
    assert set(a.held()) == {"triage", "eng-lead", "writer"}
    a.assign(["triage", "writer"])
    assert await a.sweep() == {}
    assert set(a.held()) == {"triage", "writer"}
    assert ("release", "eng-lead", "role_gone") in hooks.calls


async def test_the_heartbeat_holds_seats_past_the_ttl_and_stop_releases_them(kv: Coordination) -> None:
    hooks = Hooks()
    a = host(kv, "n1", hooks)
    a.assign(["triage", "writer"])
    a.start()
    try:
        for _ in range(50):
            if len(a.held()) == 2:
                break
            await asyncio.sleep(0.05)
        epochs = a.held()
        assert set(epochs) == {"triage", "writer"}
        await asyncio.sleep(LAPSE)
        assert a.held() == epochs
        assert all(a.may_start(h) == e for h, e in epochs.items())
        assert await peer(kv).acquire("triage") is None
    finally:
        await a.stop()
    assert a.held() == {}
    assert sorted(c[1] for c in hooks.calls if c[0] == "release" and c[2] == "drain") == ["triage", "writer"]
    assert await peer(kv).acquire("triage") is not None


async def test_a_recorded_deferral_is_resumed_by_the_next_good_renew(kv: Coordination) -> None:
    """FL-73: every deferral is recorded, so the renew's resume edge restarts the consumer."""
    hooks = Hooks()
    a = host(kv, "n1", hooks)
    epoch = await a.claim("triage")
    assert epoch is not None
    a.record_deferral("triage")
    assert a.may_start("triage") is None and not any(c[0] == "resume" for c in hooks.calls)
    assert await a.renew_all() == {"triage": True}
    assert hooks.calls[-1] == ("resume", "triage", epoch) and a.may_start("triage") == epoch
    a.record_deferral("not-held")  # no-op


async def test_the_heartbeat_starts_earlier_when_renewals_are_slow(kv: Coordination) -> None:
    """FL-72/FL-52: the renew lead grows with the recent heartbeats' cost, within its bounds.

    The test TTL is 2 s, so the heartbeat is 0.667 s and floor and cap are both a quarter of it.
    With the default 45 s TTL (a 15 s heartbeat): a quiet store keeps the 0.5 s floor, a
    heartbeat that cost 1 s starts 2 s early, and no cost moves it more than 3.75 s early.
    """
    h = host(kv, "n1")
    assert abs(h.renew_lead([]) - h.heartbeat * 0.25) < 1e-9
    assert abs(h.renew_lead([5.0]) - h.heartbeat * 0.25) < 1e-9
    default = SeatHost(
        kv, node_id="n2", owner="n2:0000abcd", protocol=PROTOCOL_VERSION, ttl=timedelta(seconds=45)
    )
    assert default.heartbeat == 15.0
    assert default.renew_lead([]) == default.renew_lead([0.001, 0.002]) == 0.5
    assert abs(default.renew_lead([0.01, 1.0, 0.2]) - 2.0) < 1e-9
    assert abs(default.renew_lead([60.0]) - 3.75) < 1e-9
