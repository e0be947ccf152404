"""Credential cooldowns shared by every node (CO-42, FL-121).

A key that got ``rate_limit`` (HTTP 429/402) or ``auth`` (401/403) is *benched*: no chain of this
node calls it until the bench ends, and every other node learns the bench through the
``cooldowns`` coordination slot (``crewlet_cooldowns``, 24 h age) and skips the key too.

What a bench holds (FL-121): the **end instant** (wall clock, UTC; never a duration, so a record
read late still means the same thing), scoped by provider entry (``providers.llm`` key), the key
named by its *hint*: the first 12 hex characters of the key's SHA-256. The key itself is never
stored, logged or published.

How long (CO-42): ``rate_limit`` → the server's ``Retry-After`` when it said, else the entry's
``cooldowns.rate_limit_seconds`` (3 600); ``auth`` → ``cooldowns.auth_seconds`` (300), doubling on
each repeat of the same key (a repeat is an auth failure after the previous auth bench ended; a
success with the key resets the streak). Every bench lasts at least 60 s (FL-121) and at most
24 h (ours: the bucket's age, so a record never outlives its own storage).

Sharing (FL-121): :meth:`CooldownBoard.bench` publishes synchronously (the caller awaits it) but
detached from the caller's cancellation (the write runs in its own task, shielded) and bounded
to 2 s. The write is a compare-and-set that never shortens a stored record: a record ending
later than ours is adopted locally instead. :meth:`CooldownBoard.pull` runs at
:meth:`CooldownBoard.start` and every 15 s; a pull only extends a local bench, never shortens it,
and an unreadable store changes nothing (warned once per outage). A board with ``coord=None``
(a single node, FL-121 "a single node shares nothing") benches locally only.

Not guaranteed: a peer learns a bench only at its next pull (up to one interval late, plus the
store's own lag), and two nodes hitting the same key at once may each call it once before either
bench lands. A bench is advice for the chain, never a lock. End instants are compared on each
node's own wall clock, so a node whose clock runs behind keeps a learned bench a little longer
(and one running ahead, a little shorter); NTP-level skew is seconds against benches of minutes.
:meth:`CooldownBoard.start` waits for its first pull (bounded by ``pull_timeout``, 5 s).

Logs: ``credential_cooled{provider, hint, kind, until}`` when this node benches a key;
``credential_cooled_by_peer{provider, hint, seconds_left}`` once per record learned from a peer;
``cooldowns_store_unreadable{error}`` once per outage; ``cooldown_publish_failed{provider, hint,
error}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from shared import coordination, logs
from shared.config import Cooldowns

__all__ = [
    "COOLDOWN_CEILING",
    "MIN_COOLDOWN",
    "Bench",
    "BenchKind",
    "CooldownBoard",
    "key_hint",
]

_log = logs.get("providers.cooldowns")

BenchKind = Literal["rate_limit", "auth"]
"""Why a key is benched: the CO-12 failure class that benched it."""

MIN_COOLDOWN = timedelta(seconds=60)
"""The shortest bench (FL-121), whatever ``Retry-After`` or the entry says."""
COOLDOWN_CEILING = timedelta(hours=24)
"""The longest bench (ours): the ``cooldowns`` bucket's age, so no record outlives its storage."""

_SLOT: coordination.Slot = "cooldowns"
_SAFE_TOKEN = re.compile(r"[A-Za-z0-9_-]+")


def key_hint(api_key: str) -> str:
    """Name an API key without revealing it (FL-121).

    Args:
        api_key: The key ("" for a keyless entry).

    Returns:
        The first 12 hex characters of the key's SHA-256.
    """
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()[:12]


def _store_key(provider_key: str, hint: str) -> str:
    """The KV key of a record: ``<provider>.<hint>``. A provider key outside the KV charset is
    replaced by ``h-`` and 16 hex of its SHA-256 (the record's value names it in full)."""
    token = (
        provider_key
        if _SAFE_TOKEN.fullmatch(provider_key)
        else ("h-" + hashlib.sha256(provider_key.encode("utf-8")).hexdigest()[:16])
    )
    return f"{token}.{hint}"


def _iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class Bench:
    """One benched key (FL-121).

    Attributes:
        provider: The ``providers.llm`` key of the entry the key belongs to.
        hint: :func:`key_hint` of the key.
        kind: Why it was benched.
        until: The end instant, timezone-aware UTC.
        node: The node that benched it (this node's id for a local bench).
    """

    provider: str
    hint: str
    kind: BenchKind
    until: datetime
    node: str

    def to_json(self) -> bytes:
        """The record's stored form: ``{provider, hint, kind, until (ISO 8601 UTC), node}``."""
        record = {
            "provider": self.provider,
            "hint": self.hint,
            "kind": self.kind,
            "until": _iso(self.until),
            "node": self.node,
        }
        return json.dumps(record, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Bench | None:
        """Parse a stored record; None when it is not one (a foreign or damaged value)."""
        try:
            data: Any = json.loads(raw)
            until = datetime.fromisoformat(str(data["until"]).replace("Z", "+00:00"))
            kind = data["kind"]
            if kind not in ("rate_limit", "auth") or until.tzinfo is None:
                return None
            return cls(
                str(data["provider"]), str(data["hint"]), kind, until.astimezone(UTC), str(data["node"])
            )
        except (ValueError, TypeError, KeyError):
            return None


class CooldownBoard:
    """This node's benched credentials, shared with every node through ``crewlet_cooldowns``
    (CO-42, FL-121). Node-wide: create one per node and let it outlive applies (a
    :class:`~shared.providers.ProviderSet` built per apply receives it).

    Args:
        coord: The coordination store; None for a single node (benches stay local).
        node_id: This node's id, written in the records it publishes.
        pull_interval: Seconds between pulls of the store (15 s, FL-121); tests pass less.
        publish_timeout: Bound on one publish, in seconds (2 s, FL-121).
        pull_timeout: Bound on one pull, in seconds.
        clock: The wall clock (timezone-aware UTC); None for ``datetime.now(UTC)``.
    """

    def __init__(
        self,
        coord: coordination.Coordination | None,
        node_id: str,
        *,
        pull_interval: float = 15.0,
        publish_timeout: float = 2.0,
        pull_timeout: float = 5.0,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.coord = coord
        self.node_id = node_id
        self.pull_interval = pull_interval
        self.publish_timeout = publish_timeout
        self.pull_timeout = pull_timeout
        self._clock = clock or (lambda: datetime.now(UTC))
        self._benches: dict[tuple[str, str], Bench] = {}
        self._auth_streak: dict[tuple[str, str], int] = {}
        self._hints: dict[str, str] = {}
        self._unreadable = False
        self._loop: asyncio.Task[None] | None = None
        self._publishing: set[asyncio.Task[None]] = set()

    def now(self) -> datetime:
        """The board's wall clock: timezone-aware UTC."""
        return self._clock()

    def hint(self, api_key: str) -> str:
        """Return :func:`key_hint` of ``api_key`` (cached per key)."""
        hint = self._hints.get(api_key)
        if hint is None:
            hint = self._hints[api_key] = key_hint(api_key)
        return hint

    def bench_of(self, provider_key: str, api_key: str) -> Bench | None:
        """Return the key's live bench, or None when it is not benched now.

        Args:
            provider_key: The entry's ``providers.llm`` key.
            api_key: The key itself ("" for a keyless entry).
        """
        bench = self._benches.get((provider_key, self.hint(api_key)))
        if bench is None or bench.until <= self._clock():
            return None
        return bench

    def is_benched(self, provider_key: str, api_key: str) -> bool:
        """True when the key must not be called now (see :meth:`bench_of`)."""
        return self.bench_of(provider_key, api_key) is not None

    def benches(self) -> list[Bench]:
        """Every live bench, local or learned, ordered by provider then hint."""
        now = self._clock()
        return sorted(
            (b for b in self._benches.values() if b.until > now), key=lambda b: (b.provider, b.hint)
        )

    def cleared(self, provider_key: str, api_key: str) -> None:
        """Record that the key answered: its ``auth`` doubling starts over (CO-42)."""
        if self._auth_streak:
            self._auth_streak.pop((provider_key, self.hint(api_key)), None)

    async def bench(
        self,
        provider_key: str,
        api_key: str,
        kind: BenchKind,
        *,
        retry_after: float | None = None,
        cooldowns: Cooldowns | None = None,
    ) -> datetime:
        """Bench a key on this node at once, then publish the bench to every node (CO-42, FL-121).

        The local bench is in place before the first await, so a concurrent call of this node
        already skips the key. The publish runs in its own task: a cancelled caller (a turn
        stopped mid-call) does not cancel it; it is bounded to :attr:`publish_timeout` seconds,
        and a failure is logged (``cooldown_publish_failed``) and never raised.

        Args:
            provider_key: The entry's ``providers.llm`` key (the record's scope).
            api_key: The key that failed ("" for a keyless entry). Never stored or logged.
            kind: ``rate_limit`` (429/402) or ``auth`` (401/403).
            retry_after: The server's ``Retry-After``, in seconds; None when it did not say.
                Used for ``rate_limit`` only.
            cooldowns: The entry's ``cooldowns`` settings; None for the defaults (3 600 s / 300 s).

        Returns:
            The bench's end instant (UTC); later than asked when a longer bench already holds.

        Raises:
            asyncio.CancelledError: The caller was cancelled while waiting for the publish (the
                local bench and the publish stand).
        """
        settings = cooldowns or Cooldowns()
        key = (provider_key, self.hint(api_key))
        now = self._clock()
        current = self.bench_of(provider_key, api_key)
        if kind == "rate_limit":
            seconds = retry_after if retry_after is not None else settings.rate_limit_seconds
        else:
            if current is None or current.kind != "auth":  # a repeat, not a concurrent failure
                self._auth_streak[key] = self._auth_streak.get(key, 0) + 1
            doublings = min(self._auth_streak.get(key, 1) - 1, 32)
            seconds = settings.auth_seconds * 2**doublings
        length = min(max(timedelta(seconds=seconds), MIN_COOLDOWN), COOLDOWN_CEILING)
        until = now + length
        if current is not None and current.until >= until:
            return current.until
        bench = Bench(provider_key, key[1], kind, until, self.node_id)
        self._benches[key] = bench
        _log.warning("credential_cooled", provider=provider_key, hint=key[1], kind=kind, until=_iso(until))
        if self.coord is None:
            return until
        task = asyncio.create_task(self._publish(bench), name=f"cooldown-publish-{key[1]}")
        self._publishing.add(task)
        task.add_done_callback(self._publishing.discard)
        await asyncio.shield(task)
        held = self._benches.get(key)
        return held.until if held is not None else until

    async def _publish(self, bench: Bench) -> None:
        """Write ``bench`` unless the store holds a later end (compare-and-set; never raises)."""
        assert self.coord is not None
        name = _store_key(bench.provider, bench.hint)
        try:
            async with asyncio.timeout(self.publish_timeout):
                while True:
                    entry = await self.coord.get(_SLOT, name)
                    stored = Bench.from_json(entry.value) if entry is not None else None
                    if stored is not None and stored.until >= bench.until:
                        self._learn(stored)
                        return
                    try:
                        await self.coord.update(
                            _SLOT, name, bench.to_json(), revision=entry.revision if entry else 0
                        )
                        return
                    except coordination.RevisionConflict:
                        continue  # a peer wrote meanwhile: compare again
        except Exception as e:  # noqa: BLE001 - sharing is best effort; the local bench stands
            _log.warning(
                "cooldown_publish_failed",
                provider=bench.provider,
                hint=bench.hint,
                error=str(e) or type(e).__name__,
            )

    def _learn(self, record: Bench) -> bool:
        """Extend the local bench to ``record`` when it ends later; True when it did (FL-121)."""
        now = self._clock()
        if record.until <= now:
            return False
        key = (record.provider, record.hint)
        current = self._benches.get(key)
        if current is not None and current.until >= record.until:
            return False
        self._benches[key] = record
        if record.node != self.node_id:
            _log.info(
                "credential_cooled_by_peer",
                provider=record.provider,
                hint=record.hint,
                seconds_left=math.ceil((record.until - now).total_seconds()),
            )
        return True

    async def pull(self) -> int:
        """Read every record of the ``cooldowns`` slot and extend local benches (FL-121).

        A pull never shortens a bench; records that ended or do not parse are ignored. An
        unreadable store (unavailable, or no answer within :attr:`pull_timeout` seconds)
        changes nothing and is logged once per outage (``cooldowns_store_unreadable``).

        Returns:
            How many local benches were added or extended (0 with no store).
        """
        if self.coord is None:
            return 0
        try:
            async with asyncio.timeout(self.pull_timeout):
                entries = await self.coord.entries(_SLOT)
        except (TimeoutError, coordination.CoordinationError) as e:
            if not self._unreadable:
                self._unreadable = True
                _log.warning("cooldowns_store_unreadable", error=str(e) or type(e).__name__)
            return 0
        self._unreadable = False
        now = self._clock()
        for key in [k for k, b in self._benches.items() if b.until <= now]:
            del self._benches[key]
        learned = 0
        for entry in entries:
            record = Bench.from_json(entry.value)
            if record is not None and self._learn(record):
                learned += 1
        return learned

    async def start(self) -> None:
        """Pull once now, then every :attr:`pull_interval` seconds until :meth:`stop` (FL-121).

        Idempotent; with no store it only marks the board started. Never raises for the store.
        """
        if self._loop is not None and not self._loop.done():
            return
        await self.pull()
        self._loop = asyncio.create_task(self._run(), name="cooldowns-pull")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.pull_interval)
            try:
                await self.pull()
            except Exception as e:  # noqa: BLE001 - the loop outlives any one pull
                _log.warning("cooldowns_store_unreadable", error=f"{type(e).__name__}: {e}")

    async def stop(self) -> None:
        """End the pull loop and wait for publishes in flight (each bounded to 2 s). Idempotent."""
        loop, self._loop = self._loop, None
        if loop is not None:
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop
        if self._publishing:
            await asyncio.gather(*list(self._publishing), return_exceptions=True)
