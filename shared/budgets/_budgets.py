"""Token budgets shared by every node through the ``budgets`` slot (CO-37, FL-119, FL-120).

What it does: every capped window of the org, then of the seat, is charged by compare-and-set per
key before a round runs; a window without room refuses the charge, and whatever the charge had
already added (the org's windows when the seat refuses, earlier windows of the same scope) is
taken back, so a refused charge increments nothing (FL-119). After the round the reservation is
settled to the actual figure, unchecked.

A refusal is recorded as a marker in the counter it refused on (see
:mod:`shared.budgets._counters`), so every node's ``GET /budgets`` sees it; the next admitted
charge of the scope rewrites the counter without it (``refused_at`` is cleared by the next
admitted charge, FL-119) at no extra read.

What it does not guarantee: a crash between the org write and the seat write leaves the org
over-stated by that charge (the fail-closed direction, FL-119); a settle that fails leaves the
reservation standing (over-stated, fail-closed again). Only capped windows are counted: a window
that gains a cap mid-way starts counting from the revision that set it. Counters never reset
themselves (FL-120): an old window's key stays in the bucket (it has no age).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from shared import logs
from shared.config import Company, OrgModel
from shared.coordination import CoordinationUnavailable

from ._caps import Caps, Scope, caps_of
from ._counters import CoordSource, Counters, Refused
from ._errors import BudgetError, BudgetExhausted, BudgetUnavailable
from ._snapshot import build_snapshot, counter_key, marker_holds
from ._windows import PERIODS, Period, windows_at

__all__ = [
    "CAS_DEADLINE_SECONDS",
    "REPORT_INTERVAL_SECONDS",
    "Budgets",
    "Charge",
    "ChargedWindow",
    "UnknownScope",
]

_log = logs.get("budgets")

CAS_DEADLINE_SECONDS = 10.0
"""Seconds one counter update keeps retrying lost compare-and-sets before answering
:class:`BudgetUnavailable` (the org key is shared by every seat of the fleet)."""

REPORT_INTERVAL_SECONDS = 15.0
"""Seconds between two ``budget_reported`` records (FL-120)."""

CompanySource = Callable[[], Company | OrgModel | None]


class UnknownScope(BudgetError, LookupError):
    """A scope name that is neither ``org`` nor an agent seat of the applied company (FL-120).

    Attributes:
        scope: The name asked for.
    """

    retryable = False

    def __init__(self, scope: str) -> None:
        self.scope = scope
        super().__init__(
            f"unknown budget scope {scope!r}: expected 'org' or 'agent:<agent id or handle>'"
            " naming an agent seat of the applied company"
        )


@dataclass(frozen=True)
class ChargedWindow:
    """One counter a charge added to.

    Attributes:
        scope: ``org`` or ``agent:<agent id>``.
        period: ``day``, ``week`` or ``month``.
        window: The window's label (``2026-11-29``).
        key: The counter's key in the ``budgets`` slot.
        ceiling: The cap in tokens when the charge was admitted.
        resets_at: When the window turns over, aware UTC.
    """

    scope: str
    period: Period
    window: str
    key: str
    ceiling: int
    resets_at: datetime


@dataclass(frozen=True)
class Charge:
    """An admitted charge: what :meth:`Budgets.settle` adjusts once the round's cost is known.

    Attributes:
        agent_id: The seat's agent id.
        tokens: Tokens reserved (the round's estimate).
        windows: The counters charged, org first; empty when nothing is capped.
        at: When it was admitted, aware UTC.
    """

    agent_id: str
    tokens: int
    windows: tuple[ChargedWindow, ...]
    at: datetime


class Budgets:
    """The fleet-wide token budgets of one node (CO-37, FL-119, FL-120).

    Caps are read from the company on every call (``company()``), so an applied revision that
    raises a ceiling releases a refusing scope at once; usage lives in the ``budgets`` slot.

    Args:
        coord: The coordination store, or a callable returning it (None while it is not open:
            every store call then raises :class:`BudgetUnavailable`).
        company: Returns the applied company (or its :class:`~shared.config.OrgModel`); None when
            no company is applied (nothing is capped).
        clock: Returns the current instant, aware (tests pass a fixed one); default UTC now.
        report_interval: Seconds between two ``budget_reported`` records (FL-120: 15).
        cas_deadline: Seconds one counter update retries lost compare-and-sets.
    """

    def __init__(
        self,
        coord: CoordSource,
        company: CompanySource,
        *,
        clock: Callable[[], datetime] | None = None,
        report_interval: float = REPORT_INTERVAL_SECONDS,
        cas_deadline: float = CAS_DEADLINE_SECONDS,
    ) -> None:
        self._counters = Counters(coord, cas_deadline=cas_deadline)
        self._company = company
        self._clock = clock or (lambda: datetime.now(UTC))
        self.report_interval = report_interval
        self._cached: tuple[object, Caps] | None = None
        self._reporter: asyncio.Task[None] | None = None

    def caps(self) -> Caps:
        """Return the caps of the applied company (rebuilt when the company object changes)."""
        source = self._company()
        if self._cached is None or self._cached[0] is not source:
            self._cached = (source, caps_of(source))
        return self._cached[1]

    def _now(self) -> datetime:
        now = self._clock()
        return now if now.tzinfo else now.replace(tzinfo=UTC)

    @staticmethod
    def _plan(caps: Caps, scopes: list[Scope], now: datetime) -> list[ChargedWindow]:
        wins = windows_at(now, caps.timezone)
        return [
            ChargedWindow(s.name, p, wins[p].label, counter_key(s, wins[p]), s.caps[p], wins[p].resets_at)
            for s in scopes
            for p in PERIODS
            if p in s.caps
        ]

    # -- charge and settle --------------------------------------------------------------------------

    async def charge(self, agent_id: str | uuid.UUID, tokens: int) -> Charge:
        """Reserve ``tokens`` in every capped window of the org, then of the seat (CO-37, FL-119).

        Each window is charged by compare-and-set on its own key, org windows first. A window
        without room refuses: the windows already charged by this call are taken back (a seat
        refusal compensates the org), the refusal is recorded in the refusing counter
        (``refused_at``), and nothing stays incremented. The caller logs ``budget_exhausted``
        (with :meth:`BudgetExhausted.to_dict`) and ends the turn. An
        admitted charge clears the refusal markers of the windows it charged.

        Args:
            agent_id: The seat's agent id (:attr:`shared.config.Seat.agent_id`).
            tokens: Tokens to reserve (the round's estimate), at least 0.

        Returns:
            The admitted charge, to pass to :meth:`settle`. With no cap anywhere nothing is
            written and the charge holds no windows.

        Raises:
            BudgetExhausted: a window has no room; it names the scope, period and figures.
            BudgetUnavailable: the store could not be read or written (never an exhaustion).
            ValueError: ``tokens`` is negative.
        """
        if tokens < 0:
            raise ValueError(f"a charge is at least 0 tokens (got {tokens})")
        aid = str(agent_id)
        caps = self.caps()
        now = self._now()
        plan = self._plan(caps, [caps.org, caps.agent(aid)], now)
        applied: list[ChargedWindow] = []
        try:
            for w in plan:
                try:
                    await self._counters.add(w.key, tokens, ceiling=w.ceiling, clear_refusal=True)
                except Refused as r:
                    refusal = BudgetExhausted(
                        w.scope, w.period, w.resets_at, r.spent, w.ceiling, requested=tokens
                    )
                    await self._compensate(applied, tokens, reason="refused")
                    await self._mark_refused(w, refusal, now)
                    # the caller logs ``budget_exhausted`` with its turn's context (one line per refusal)
                    raise refusal from None
                applied.append(w)
        except (CoordinationUnavailable, BudgetUnavailable) as e:
            await self._compensate(applied, tokens, reason="store_error")
            if isinstance(e, BudgetUnavailable):
                raise
            raise BudgetUnavailable(str(e)) from e
        return Charge(aid, tokens, tuple(applied), now)

    async def _compensate(self, applied: list[ChargedWindow], tokens: int, *, reason: str) -> None:
        """Take back what a failed charge added; a store error here leaves the counter over-stated."""
        for w in reversed(applied):
            try:
                await self._counters.add(w.key, -tokens, ceiling=None, clear_refusal=False)
            except (CoordinationUnavailable, BudgetUnavailable) as e:
                _log.warning(
                    "budget_compensation_failed",
                    scope=w.scope,
                    period=w.period,
                    key=w.key,
                    tokens=tokens,
                    reason=reason,
                    error=str(e),
                )

    async def _mark_refused(self, w: ChargedWindow, refusal: BudgetExhausted, now: datetime) -> None:
        """Record ``refused_at`` in the refusing counter (best effort: the refusal stands anyway)."""
        marker = {"at": now.isoformat(), "requested": refusal.requested, "ceiling": refusal.ceiling}
        try:
            await self._counters.cas(w.key, lambda old: {**old, "refused": marker})
        except (CoordinationUnavailable, BudgetUnavailable) as e:
            _log.warning("budget_refusal_unrecorded", scope=w.scope, period=w.period, key=w.key, error=str(e))

    async def settle(self, charge: Charge, actual: int) -> None:
        """Adjust the charge's counters by ``actual - charge.tokens``, unchecked (FL-119).

        The same keys the charge wrote are adjusted, even when a window has turned since. A
        counter never goes below 0. A settle that pushes a window past its ceiling logs
        ``budget_overrun{scope, period, window, spent, ceiling, over}`` (the round already ran;
        the next charge refuses). A refusal marker is kept.

        Args:
            charge: What :meth:`charge` returned.
            actual: Tokens the round actually spent, at least 0.

        Raises:
            BudgetUnavailable: a counter could not be adjusted (every counter is still tried; the
                ones that failed keep the reservation).
            ValueError: ``actual`` is negative.
        """
        if actual < 0:
            raise ValueError(f"a settle is at least 0 tokens (got {actual})")
        delta = actual - charge.tokens
        if delta == 0:
            return
        failed: list[str] = []
        for w in charge.windows:
            try:
                before, after = await self._counters.add(w.key, delta, ceiling=None, clear_refusal=False)
            except (CoordinationUnavailable, BudgetUnavailable) as e:
                failed.append(f"{w.key}: {e}")
                continue
            if delta > 0 and after > w.ceiling:
                _log.warning(
                    "budget_overrun",
                    scope=w.scope,
                    period=w.period,
                    window=w.window,
                    agent_id=charge.agent_id,
                    reserved=charge.tokens,
                    actual=actual,
                    was=before,
                    spent=after,
                    ceiling=w.ceiling,
                    over=after - w.ceiling,
                )
        if failed:
            raise BudgetUnavailable("settle failed for " + "; ".join(failed))

    # -- reads ----------------------------------------------------------------------------------------

    async def refusal(self, agent_id: str | uuid.UUID) -> dict[str, Any] | None:
        """Return why the seat's next round would be refused now, or None when it may run (CO-37).

        Used to park a refused seat's deliveries and to release them: a window is refusing while
        a 1-token charge would not fit, or while a refusal recorded in it stands (the ceiling it
        refused at has not been raised and no admitted charge or reset has cleared it). A new
        window, a raised ceiling or a reset releases it. Org windows are judged first.

        Args:
            agent_id: The seat's agent id.

        Returns:
            The refusal's :meth:`BudgetExhausted.to_dict` (``{scope, period, resets_at, spent,
            ceiling}``), or None when the seat may run (see :meth:`exhaustion` for the error).

        Raises:
            BudgetUnavailable: the counters could not be read (never read as "room").
        """
        found = await self.exhaustion(agent_id)
        return None if found is None else found.to_dict()

    async def exhaustion(self, agent_id: str | uuid.UUID) -> BudgetExhausted | None:
        """Return the refusal :meth:`refusal` describes, as the error, or None.

        ``requested`` is the standing refusal's tokens when a recorded refusal holds the window,
        else 1 (a window with no room left).

        Raises:
            BudgetUnavailable: the counters could not be read.
        """
        caps = self.caps()
        plan = self._plan(caps, [caps.org, caps.agent(agent_id)], self._now())
        if not plan:
            return None
        records = await self._counters.read([w.key for w in plan])
        for w, rec in zip(plan, records, strict=True):
            spent = int(rec["spent"])
            if spent + 1 > w.ceiling:
                return BudgetExhausted(w.scope, w.period, w.resets_at, spent, w.ceiling, requested=1)
            if marker_holds(rec, w.ceiling):
                asked = int(rec["refused"].get("requested", 1))
                return BudgetExhausted(w.scope, w.period, w.resets_at, spent, w.ceiling, requested=asked)
        return None

    async def snapshot(self) -> dict[str, Any]:
        """Return the budgets view of ``GET /budgets`` (FL-120).

        Returns:
            ``{"timezone", "at", "windows": {period: {"window", "starts_at", "resets_at"}},
            "scopes": [{"scope", "handle", "caps": {period: tokens}, "state", "refused_at",
            "windows": {period: {"window", "spent", "ceiling", "state", "resets_at",
            "refused_at"}}}], "refusing": [scope names]}``. Scopes are ``org`` (always first)
            and every agent seat with a cap; ``state`` is ``ok``, ``near`` (≥ 90 %) or
            ``refusing`` (CO-37); times are ISO 8601 UTC; ``refused_at`` is None when no refusal
            stands; ``spent`` and ``ceiling`` are tokens.

        Raises:
            BudgetUnavailable: the counters could not be read.
        """
        caps = self.caps()
        now = self._now()
        scopes = caps.capped()
        keys = [w.key for w in self._plan(caps, scopes, now)]
        records = await self._counters.read(keys) if keys else []
        return build_snapshot(caps, now, scopes, dict(zip(keys, records, strict=True)))

    # -- reset ----------------------------------------------------------------------------------------

    async def reset(self, scope: str | None = None) -> list[dict[str, Any]]:
        """Zero the current ``day``, ``week`` and ``month`` counters of one scope or of all (FL-120).

        Every current window of the scope is zeroed whether capped or not, and its refusal marker
        dropped; a window never charged stays absent. ``None`` resets ``org`` and every agent
        seat with a cap. Each counter is rewritten by compare-and-set, so a charge racing the
        reset lands wholly before or after it. Every node's next read sees the reset.

        Args:
            scope: ``org``, ``agent:<agent id>`` or ``agent:<handle>``; None for all.

        Returns:
            What was zeroed: ``[{"scope", "period", "window", "was"}]`` (``was`` = tokens before),
            one row per counter that existed.

        Raises:
            UnknownScope: ``scope`` names neither ``org`` nor an agent seat of the company.
            BudgetUnavailable: the store could not be read or written (counters before the
                failing one stay zeroed).
        """
        caps = self.caps()
        if scope is None:
            scopes = caps.capped()
        else:
            found = caps.resolve(scope)
            if found is None:
                raise UnknownScope(scope)
            scopes = [found]
        wins = windows_at(self._now(), caps.timezone)
        zeroed: list[dict[str, Any]] = []
        try:
            for s in scopes:
                for p in PERIODS:
                    key = counter_key(s, wins[p])
                    if not await self._counters.exists(key):
                        continue
                    old, _new = await self._counters.cas(key, lambda _old: {"spent": 0})
                    zeroed.append(
                        {"scope": s.name, "period": p, "window": wins[p].label, "was": int(old["spent"])}
                    )
        except CoordinationUnavailable as e:
            raise BudgetUnavailable(str(e)) from e
        _log.info("budget_reset", scope=scope or "all", zeroed=zeroed)
        return zeroed

    # -- the reporter -------------------------------------------------------------------------------

    async def report(self) -> dict[str, Any]:
        """Log one ``budget_reported`` record with this node's view (FL-120) and return its fields.

        Fields: ``org`` (period → ``{"spent", "ceiling"}`` in tokens), ``near`` and ``refusing``
        (scope names), ``scopes`` (how many are shown). An unreadable store logs
        ``budget_reported`` with ``error`` instead of figures; it never raises a budget error.
        """
        try:
            snap = await self.snapshot()
        except BudgetError as e:
            failed: dict[str, Any] = {"error": str(e)}
            _log.info("budget_reported", **failed)
            return failed
        org = snap["scopes"][0]
        fields: dict[str, Any] = {
            "org": {p: {"spent": w["spent"], "ceiling": w["ceiling"]} for p, w in org["windows"].items()},
            "near": [s["scope"] for s in snap["scopes"] if s["state"] == "near"],
            "refusing": snap["refusing"],
            "scopes": len(snap["scopes"]),
        }
        _log.info("budget_reported", **fields)
        return fields

    def start(self) -> None:
        """Start the reporter: ``budget_reported`` every :attr:`report_interval` seconds (FL-120).

        Idempotent; the first record is written at once. Needs a running event loop.
        """
        if self._reporter is None or self._reporter.done():
            self._reporter = asyncio.get_running_loop().create_task(
                self._report_loop(), name="budget-reporter"
            )

    async def _report_loop(self) -> None:
        while True:
            await self.report()
            await asyncio.sleep(self.report_interval)

    async def stop(self) -> None:
        """Stop the reporter and wait for it to end (idempotent)."""
        task, self._reporter = self._reporter, None
        if task is not None:
            task.cancel()
            with suppress(asyncio.CancelledError):
                await task
