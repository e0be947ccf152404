"""The ``GET /budgets`` view built from counter records (FL-120, CO-37's states)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ._caps import Caps, Scope
from ._windows import PERIODS, Window, windows_at

__all__ = ["NEAR_FRACTION", "build_snapshot", "counter_key", "marker_holds", "window_state"]

NEAR_FRACTION = 0.9
"""A window at or above this fraction of its ceiling is ``near`` (CO-37)."""

_RANK = {"ok": 0, "near": 1, "refusing": 2}


def counter_key(scope: Scope, window: Window) -> str:
    """Return the counter key of ``scope`` in ``window``: ``<scope key>.<period>.<label>``."""
    return f"{scope.key}.{window.period}.{window.label}"


def marker_holds(rec: dict[str, Any], ceiling: int) -> bool:
    """Whether a counter's refusal marker still refuses: the ceiling it refused at is not raised."""
    marker = rec.get("refused")
    return isinstance(marker, dict) and int(marker.get("ceiling", 0)) >= ceiling


def window_state(spent: int, ceiling: int, refused: bool) -> str:
    """Return ``refusing`` (no room for 1 token, or a standing refusal), ``near`` (≥ 90 %) or ``ok``."""
    if refused or spent >= ceiling:
        return "refusing"
    return "near" if spent >= NEAR_FRACTION * ceiling else "ok"


def build_snapshot(caps: Caps, now: datetime, scopes: list[Scope], records: dict[str, Any]) -> dict[str, Any]:
    """Return the ``GET /budgets`` answer (see :meth:`shared.budgets.Budgets.snapshot`).

    Args:
        caps: The applied caps.
        now: The instant the counters were read, aware.
        scopes: The scopes to show, ``org`` first.
        records: Counter key → record, for every capped window of ``scopes``.
    """
    wins = windows_at(now, caps.timezone)
    out: list[dict[str, Any]] = []
    for s in scopes:
        windows: dict[str, Any] = {}
        refused_at: str | None = None
        state = "ok"
        for p in PERIODS:
            if p not in s.caps:
                continue
            w, ceiling = wins[p], s.caps[p]
            rec = records[counter_key(s, w)]
            holds = marker_holds(rec, ceiling)
            at = rec["refused"].get("at") if holds else None
            wstate = window_state(int(rec["spent"]), ceiling, holds)
            windows[p] = {
                "window": w.label,
                "spent": int(rec["spent"]),
                "ceiling": ceiling,
                "state": wstate,
                "resets_at": w.resets_at.isoformat(),
                "refused_at": at,
            }
            state = max(state, wstate, key=_RANK.__getitem__)
            if at is not None and (refused_at is None or at > refused_at):
                refused_at = at
        out.append(
            {
                "scope": s.name,
                "handle": s.handle,
                "caps": dict(s.caps),
                "state": state,
                "refused_at": refused_at,
                "windows": windows,
            }
        )
    return {
        "timezone": caps.timezone,
        "at": now.isoformat(),
        "windows": {
            p: {"window": w.label, "starts_at": w.starts_at.isoformat(), "resets_at": w.resets_at.isoformat()}
            for p, w in wins.items()
        },
        "scopes": out,
        "refusing": [s["scope"] for s in out if s["state"] == "refusing"],
    }
