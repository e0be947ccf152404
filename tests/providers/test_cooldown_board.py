"""The credential cooldown board (CO-42, FL-121): benches, hints, extend-only pulls.

Pure unit tests over the in-memory coordination twin (and the faulty one for an unreadable store)
on a hand-moved wall clock; the same board over a real nats-server KV is in tests/cooldowns.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
from datetime import UTC, datetime, timedelta

import structlog

from shared.config import Cooldowns
from shared.coordination import FaultyCoordination, MemoryCoordination, Slot
from shared.providers import MIN_COOLDOWN, Bench, CooldownBoard, key_hint

KEY = "sk-live-0123456789abcdef"
START = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class Clock:
    """A wall clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def _board(coord: object, node: str, clock: Clock) -> CooldownBoard:
    return CooldownBoard(coord, node, clock=clock)  # type: ignore[arg-type]


async def _record(coord: MemoryCoordination, provider: str = "p", hint: str | None = None) -> Bench | None:
    entries = await coord.entries("cooldowns")
    for entry in entries:
        bench = Bench.from_json(entry.value)
        if bench is not None and bench.provider == provider and (hint is None or bench.hint == hint):
            return bench
    return None


def test_hint_is_twelve_hex_of_the_sha256_never_the_key() -> None:
    hint = key_hint(KEY)
    assert hint == hashlib.sha256(KEY.encode()).hexdigest()[:12]
    assert len(hint) == 12 and KEY not in hint and hint not in KEY


async def test_rate_limit_uses_retry_after_else_the_entry_setting_with_a_60_s_minimum() -> None:
    clock = Clock()
    board = _board(None, "a", clock)
    assert await board.bench("p", "k1", "rate_limit", retry_after=120) == START + timedelta(seconds=120)
    assert await board.bench("p", "k2", "rate_limit", retry_after=7) == START + MIN_COOLDOWN
    assert await board.bench("p", "k3", "rate_limit", retry_after=0) == START + MIN_COOLDOWN
    assert await board.bench("p", "k4", "rate_limit") == START + timedelta(seconds=3600)  # default
    settings = Cooldowns(rate_limit_seconds=90, auth_seconds=300)
    assert await board.bench("p", "k5", "rate_limit", cooldowns=settings) == START + timedelta(seconds=90)
    tiny = Cooldowns(rate_limit_seconds=5, auth_seconds=1)
    assert await board.bench("p", "k6", "rate_limit", cooldowns=tiny) == START + MIN_COOLDOWN
    assert await board.bench("p", "k7", "auth", cooldowns=tiny) == START + MIN_COOLDOWN
    assert board.is_benched("p", "k1") and not board.is_benched("p", "other")
    assert not board.is_benched("q", "k1")  # scoped by provider entry
    clock.advance(120)
    assert not board.is_benched("p", "k1") and board.is_benched("p", "k4")


async def test_auth_doubles_on_repeats_of_the_same_key_and_a_success_resets_it() -> None:
    clock = Clock()
    board = _board(None, "a", clock)
    settings = Cooldowns(rate_limit_seconds=3600, auth_seconds=100)
    lengths = []
    for _ in range(3):
        until = await board.bench("p", KEY, "auth", cooldowns=settings)
        lengths.append((until - clock.now).total_seconds())
        clock.advance(lengths[-1] + 1)  # the bench ended; the next failure is a repeat
    assert lengths == [100, 200, 400]
    # another key of the same entry starts at the base
    assert await board.bench("p", "other", "auth", cooldowns=settings) == clock.now + timedelta(seconds=100)
    # a second failure reported while the bench still holds (a concurrent call) is no repeat:
    # the bench restarts at the same length rather than doubling
    clock.advance(1)
    assert await board.bench("p", "other", "auth", cooldowns=settings) == clock.now + timedelta(seconds=100)
    board.cleared("p", KEY)
    until = await board.bench("p", KEY, "auth", cooldowns=settings)
    assert until == clock.now + timedelta(seconds=100)


async def test_a_bench_is_published_as_an_end_instant_under_a_hint_and_logged_without_the_key() -> None:
    clock = Clock()
    coord = MemoryCoordination()
    board = _board(coord, "node-a", clock)
    with structlog.testing.capture_logs() as logs:
        until = await board.bench("p", KEY, "rate_limit", retry_after=300)
    entries = await coord.entries("cooldowns")
    assert [e.key for e in entries] == [f"p.{key_hint(KEY)}"]
    raw = entries[0].value.decode()
    assert KEY not in raw
    assert json.loads(raw) == {
        "provider": "p",
        "hint": key_hint(KEY),
        "kind": "rate_limit",
        "until": "2026-11-29T12:05:00.000000Z",
        "node": "node-a",
    }
    assert until == START + timedelta(seconds=300)
    cooled = [e for e in logs if e["event"] == "credential_cooled"]
    assert cooled == [
        {
            "event": "credential_cooled",
            "component": "providers.cooldowns",
            "log_level": "warning",
            "provider": "p",
            "hint": key_hint(KEY),
            "kind": "rate_limit",
            "until": "2026-11-29T12:05:00.000000Z",
        }
    ]
    assert all(KEY not in repr(e) for e in logs)


async def test_a_provider_key_outside_the_kv_charset_still_publishes() -> None:
    coord = MemoryCoordination()
    board = _board(coord, "a", Clock())
    await board.bench("my provider/ü", KEY, "rate_limit")
    entries = await coord.entries("cooldowns")
    assert len(entries) == 1 and entries[0].key.startswith("h-")
    record = Bench.from_json(entries[0].value)
    assert record is not None and record.provider == "my provider/ü"


async def test_pull_learns_a_peer_bench_once_and_only_extends() -> None:
    clock = Clock()
    coord = MemoryCoordination()
    a, b = _board(coord, "a", clock), _board(coord, "b", clock)
    await a.bench("p", KEY, "rate_limit", retry_after=600)
    with structlog.testing.capture_logs() as logs:
        assert await b.pull() == 1
        assert await b.pull() == 0  # the same record again: nothing learned, nothing logged
    by_peer = [e for e in logs if e["event"] == "credential_cooled_by_peer"]
    assert by_peer == [
        {
            "event": "credential_cooled_by_peer",
            "component": "providers.cooldowns",
            "log_level": "info",
            "provider": "p",
            "hint": key_hint(KEY),
            "seconds_left": 600,
        }
    ]
    assert b.is_benched("p", KEY)
    bench = b.bench_of("p", KEY)
    assert bench is not None and bench.until == START + timedelta(seconds=600) and bench.node == "a"


async def test_a_pull_never_shortens_a_longer_local_bench() -> None:
    clock = Clock()
    coord = MemoryCoordination()
    b = _board(coord, "b", clock)
    await b.bench("p", KEY, "rate_limit", retry_after=3000)
    # a peer's shorter record lands in the store afterwards (written directly, as an older peer might)
    short = Bench("p", key_hint(KEY), "rate_limit", START + timedelta(seconds=100), "a")
    await coord.put("cooldowns", f"p.{key_hint(KEY)}", short.to_json())
    assert await b.pull() == 0
    bench = b.bench_of("p", KEY)
    assert bench is not None and bench.until == START + timedelta(seconds=3000)
    clock.advance(200)
    assert b.is_benched("p", KEY)


async def test_a_publish_never_shortens_a_stored_record_and_adopts_the_longer_one() -> None:
    clock = Clock()
    coord = MemoryCoordination()
    a, b = _board(coord, "a", clock), _board(coord, "b", clock)
    await b.bench("p", KEY, "rate_limit", retry_after=3000)
    until = await a.bench("p", KEY, "rate_limit", retry_after=100)
    assert until == START + timedelta(seconds=3000)  # a learned b's longer bench while publishing
    stored = await _record(coord)
    assert stored is not None and stored.until == START + timedelta(seconds=3000) and stored.node == "b"
    # and a longer bench does replace a shorter record
    await a.bench("p", "k2", "rate_limit", retry_after=100)
    await b.bench("p", "k2", "rate_limit", retry_after=500)
    stored = await _record(coord, hint=key_hint("k2"))
    assert stored is not None and stored.until == START + timedelta(seconds=500) and stored.node == "b"


async def test_records_that_ended_or_do_not_parse_change_nothing() -> None:
    clock = Clock()
    coord = MemoryCoordination()
    old = Bench("p", key_hint(KEY), "rate_limit", START - timedelta(seconds=1), "a")
    await coord.put("cooldowns", "p.old", old.to_json())
    await coord.put("cooldowns", "p.junk", b"not json")
    await coord.put("cooldowns", "p.half", json.dumps({"provider": "p"}).encode())
    board = _board(coord, "b", clock)
    assert await board.pull() == 0
    assert board.benches() == []


async def test_an_unreadable_store_changes_nothing_and_warns_once() -> None:
    clock = Clock()
    board = _board(FaultyCoordination(), "b", clock)
    with structlog.testing.capture_logs() as logs:
        until = await board.bench("p", KEY, "rate_limit", retry_after=90)  # publish fails, bench holds
        assert await board.pull() == 0
        assert await board.pull() == 0
    assert until == START + timedelta(seconds=90)
    assert board.is_benched("p", KEY)
    events = [e["event"] for e in logs]
    assert events.count("cooldowns_store_unreadable") == 1
    assert events.count("cooldown_publish_failed") == 1
    assert all(KEY not in repr(e) for e in logs)


async def test_a_store_that_becomes_unreadable_keeps_what_was_learned_and_warns_again_next_outage() -> None:
    clock = Clock()
    coord = MemoryCoordination()
    await _board(coord, "a", clock).bench("p", KEY, "rate_limit", retry_after=600)
    b = _board(coord, "b", clock)
    assert await b.pull() == 1
    with structlog.testing.capture_logs() as logs:
        b.coord = FaultyCoordination()
        assert await b.pull() == 0
        assert await b.pull() == 0
        b.coord = coord
        assert await b.pull() == 0  # readable again: the outage is over
        b.coord = FaultyCoordination()
        assert await b.pull() == 0
    assert b.is_benched("p", KEY)
    assert [e["event"] for e in logs] == ["cooldowns_store_unreadable", "cooldowns_store_unreadable"]


async def test_a_single_node_shares_nothing_but_still_benches() -> None:
    board = _board(None, "solo", Clock())
    await board.bench("p", KEY, "rate_limit")
    assert board.is_benched("p", KEY)
    assert await board.pull() == 0
    await board.start()
    await board.stop()


class HeldWrites(MemoryCoordination):
    """The twin, whose compare-and-set writes wait until the test lets them through."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.waiting = asyncio.Event()

    async def update(self, slot: Slot, key: str, value: bytes, *, revision: int) -> int:
        self.waiting.set()
        await self.release.wait()
        return await super().update(slot, key, value, revision=revision)


async def test_a_cancelled_caller_does_not_cancel_the_publish() -> None:
    coord = HeldWrites()
    board = _board(coord, "a", Clock())
    call = asyncio.create_task(board.bench("p", KEY, "rate_limit", retry_after=120))
    await coord.waiting.wait()  # the publish is under way, held at its write
    assert board.is_benched("p", KEY)
    call.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await call
    assert call.cancelled()
    assert await coord.entries("cooldowns") == []
    coord.release.set()
    await board.stop()  # waits for publishes in flight
    stored = await _record(coord)
    assert stored is not None and stored.until == START + timedelta(seconds=120)


async def test_a_publish_that_gets_no_answer_is_bounded_and_the_bench_holds() -> None:
    coord = HeldWrites()  # never released: the store takes the write and never answers
    board = CooldownBoard(coord, "a", publish_timeout=0.1, clock=Clock())
    with structlog.testing.capture_logs() as logs:
        until = await board.bench("p", KEY, "rate_limit", retry_after=120)
    assert until == START + timedelta(seconds=120) and board.is_benched("p", KEY)
    assert [e["event"] for e in logs] == ["credential_cooled", "cooldown_publish_failed"]
    await board.stop()


async def test_start_pulls_at_once_and_then_on_the_interval() -> None:
    clock = Clock()
    coord = MemoryCoordination()
    a = _board(coord, "a", clock)
    await a.bench("p", KEY, "rate_limit", retry_after=600)
    b = CooldownBoard(coord, "b", pull_interval=0.05, clock=clock)
    await b.start()
    try:
        assert b.is_benched("p", KEY)  # the pull at start
        await a.bench("p", "k2", "rate_limit", retry_after=600)
        for _ in range(200):
            if b.is_benched("p", "k2"):
                break
            await asyncio.sleep(0.02)
        assert b.is_benched("p", "k2")
    finally:
        await b.stop()
