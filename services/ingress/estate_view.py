"""The estate as ``GET /estate`` shows it (FL-138, ES-23, ES-47..ES-59, ES-86): read from the
coordination slots, the broker's stream info and this process's alarms, never by asking peers.

Used by ``services/ingress/api/routes/estate.py`` (its docstring says the answer's shape):
:func:`estate_view` builds the answer; :func:`capacity` is a log's gate reserve and headroom.
"""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

import nats.errors
import nats.js.errors

from shared import leases
from shared.coordination import CoordinationUnavailable
from shared.estate import DOMAINS, STREAMS
from shared.estate._alarms import active_alarms
from shared.estate.log import evicted_since, is_compacted
from shared.runtime import NodeContext

__all__ = ["REMEDY", "STALE_AFTER", "capacity", "estate_view"]

STALE_AFTER = 30.0
"""Seconds after which a positions row is reported ``stale`` (three missed heartbeats)."""

REMEDY: dict[str, str] = {
    "apply_lag": "the copy is more than a minute behind its log: read the node's log for apply errors "
    "and check its broker link; it catches up by itself once the cause clears",
    "wal_large": "the estate WAL is past 1 GiB: a read transaction that never ends keeps the checkpoint "
    "from truncating it; find the long reader, or lower retention.checkpoint_interval",
    "trim_blocked": "the trim is blocked by the terms named in blocked_by; clear the blocking term "
    "(for backup_floor: take a backup with `crewlet backup`)",
    "backup_age": "the newest verified backup is older than retention.backup_max_age: take a backup "
    "with `crewlet backup`",
    "volume_low": "the volume holding store.dir / store.snapshot_dir lacks room for the next snapshot, "
    "vacuum or restore copy: free space or grow the volume (the snapshot volume needs about 4.2 x the "
    "estate size, ES-59)",
    "floor_unknown": "the trim floor could not be read for four heartbeats: check the coordination store",
    "log_headroom": "a log is within a tenth of its soft ceiling: let the trim run (check blocked_by) or "
    "raise the ceiling with `crewlet retention set-capacity`",
}
"""Alarm kind → the remedy printed with it (ES-86); a kind not named here points at the node's log."""

_GENERIC_REMEDY = "see the node's log (the alarm_started line names the measurement)"


def _micros() -> int:
    return int(time.time() * 1_000_000)


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _snapshot(snap: Any, now: int) -> dict[str, Any] | None:
    if not isinstance(snap, dict):
        return None
    taken = snap.get("taken_at")
    return {
        "seq": snap.get("seq"),
        "taken_at": taken,
        "age_seconds": round((now - taken) / 1e6, 1) if isinstance(taken, int) and taken > 0 else None,
        "sha256": snap.get("sha256"),
        "bytes": snap.get("bytes"),
    }


def _row(raw: dict[str, Any], now: int, live: set[str] | None) -> dict[str, Any]:
    """One positions row in the answer's shape; absent fields are null."""
    applied = raw.get("applied_through", raw.get("seq"))
    last = raw.get("log_last")
    at = raw.get("at")
    age = round((now - at) / 1e6, 1) if isinstance(at, int) and at > 0 else None
    return {
        "node": raw.get("node"),
        "domain": raw.get("domain"),
        "stream": raw.get("stream"),
        "seq": raw.get("seq"),
        "applied_through": applied,
        "generation": raw.get("generation"),
        "log_first": raw.get("log_first"),
        "log_last": last,
        "lag": max(0, last - applied) if isinstance(last, int) and isinstance(applied, int) else None,
        "state": raw.get("state"),
        "log_diverged": raw.get("log_diverged"),
        "snapshot": _snapshot(raw.get("snapshot"), now),
        "snapshot_skip": raw.get("snapshot_skip"),
        "store_bytes": raw.get("store_bytes"),
        "wal_bytes": raw.get("wal_bytes"),
        "at": at,
        "age_seconds": age,
        "stale": age is None or age > STALE_AFTER,
        "live": (raw.get("node") in live) if live is not None else None,
    }


def capacity(bytes_: int, max_bytes: int) -> tuple[int | None, float | None]:
    """Return ``(reserve_bytes, headroom_fraction)`` of a log (ES-86, ES-88).

    The gate reserve is the top sixteenth of the ceiling; the headroom is the fraction of the soft
    ceiling (ceiling minus reserve) still free, floored at 0. Both are None for an unlimited log
    (``max_bytes`` ≤ 0).
    """
    if max_bytes <= 0:
        return None, None
    reserve = max_bytes // 16
    soft = max_bytes - reserve
    return reserve, round(max(0.0, (soft - bytes_) / soft), 4) if soft > 0 else 0.0


async def _positions(ctx: NodeContext, unreadable: list[str]) -> list[dict[str, Any]]:
    assert ctx.coord is not None
    out: list[dict[str, Any]] = []
    if ctx.coord.kind == "memory" and ctx.link is not None:
        # process-local coordination: the heartbeat still writes the broker's bucket
        bucket = f"{ctx.cfg.coordination.bucket_prefix}_positions"
        try:
            kv = await ctx.link.js.key_value(bucket)
            try:
                keys = await kv.keys()
            except nats.js.errors.NoKeysError:
                keys = []  # no data node has reported yet
            for k in keys:
                got = await kv.get(k)
                v = _loads(got.value or b"")
                if isinstance(v, dict):
                    out.append(v)
        except (TimeoutError, nats.errors.Error, nats.js.errors.Error):
            unreadable.append("positions")
        return out
    try:
        for e in await ctx.coord.entries("positions"):
            v = _loads(e.value)
            if isinstance(v, dict):
                out.append(v)
    except CoordinationUnavailable:
        unreadable.append("positions")
    return out


async def _records(ctx: NodeContext, slot: Any, unreadable: list[str]) -> list[dict[str, Any]]:
    assert ctx.coord is not None
    try:
        entries = await ctx.coord.entries(slot)
    except CoordinationUnavailable:
        unreadable.append(str(slot))
        return []
    out = []
    for e in entries:
        v = _loads(e.value)
        if isinstance(v, dict):
            out.append(v)
    return out


async def _floors(ctx: NodeContext, unreadable: list[str]) -> dict[str, Any]:
    assert ctx.coord is not None
    floors: dict[str, Any] = {}
    for domain in DOMAINS:
        if is_compacted(domain):  # a compacted log (usage) is never trimmed: it has no floor (ES-69)
            continue
        try:
            e = await ctx.coord.get("trim_floors", domain)
        except CoordinationUnavailable:
            if "trim_floors" not in unreadable:
                unreadable.append("trim_floors")
            floors[domain] = None
            continue
        v = _loads(e.value) if e is not None else None
        floors[domain] = v if isinstance(v, dict) else None
    return floors


async def _logs(ctx: NodeContext) -> dict[str, Any]:
    logs: dict[str, Any] = {}
    for domain in DOMAINS:
        stream = STREAMS[domain]
        entry: dict[str, Any] = {
            "stream": stream,
            "bytes": None,
            "max_bytes": None,
            "first_seq": None,
            "last_seq": None,
            "reserve_bytes": None,
            "headroom_fraction": None,
        }
        if ctx.link is None:
            entry["error"] = "broker_unreachable: the node has no broker link"
        else:
            try:
                info = await ctx.link.js.stream_info(stream)
            except (TimeoutError, nats.errors.Error, nats.js.errors.Error) as e:
                entry["error"] = f"unreadable: {type(e).__name__}"
            else:
                used = int(info.state.bytes or 0)
                ceiling = int(info.config.max_bytes if info.config.max_bytes is not None else -1)
                reserve, headroom = capacity(used, ceiling)
                entry.update(
                    bytes=used,
                    max_bytes=ceiling,
                    first_seq=int(info.state.first_seq),
                    last_seq=int(info.state.last_seq),
                    reserve_bytes=reserve,
                    headroom_fraction=headroom,
                )
        logs[domain] = entry
    return logs


def _alarms(ctx: NodeContext) -> tuple[list[str], dict[str, Any]]:
    detail: dict[str, Any] = {}
    for kind, d in sorted(active_alarms().items()):
        measurement = dict(d.get("measurement") or {})
        own = measurement.pop("remedy", None)  # an alarm that names its own remedy keeps it
        remedy = str(own) if own else REMEDY.get(kind, _GENERIC_REMEDY)
        if kind in ("trim_blocked", "backup_age") and ctx.cfg.retention.backup_owner:
            remedy += f" (backups are kept by {ctx.cfg.retention.backup_owner})"
        detail[kind] = {"since": d.get("since"), "measurement": measurement, "remedy": remedy}
    return sorted(detail), detail


async def estate_view(ctx: NodeContext) -> dict[str, Any]:
    """The ``GET /estate`` answer (the shape is the route's docstring); ``ctx.coord`` must be open."""
    assert ctx.coord is not None
    now = _micros()
    unreadable: list[str] = []
    try:
        live: set[str] | None = {n["id"] for n in (await leases.fleet_view(ctx.coord))["nodes"]}
    except CoordinationUnavailable:
        live = None
    rows = [_row(p, now, live) for p in await _positions(ctx, unreadable)]
    rows.sort(key=lambda x: (str(x["domain"]), str(x["node"])))
    kinds, detail = _alarms(ctx)
    evicted: dict[str, dict[str, int]] = {}
    est = ctx.extras.get("estate")
    if est is not None:  # ES-51: who stands evicted, as this node's copy applied the gates
        with contextlib.suppress(Exception):
            evicted = await est.store.read(evicted_since)
    ret = ctx.cfg.retention
    tr = ctx.cfg.stream.tracker_retention
    return {
        "layout": 0,
        "placement": "whole",
        "asked": ctx.node_id,
        "at": now,
        "nodes": rows,
        "logs": await _logs(ctx),
        "floors": await _floors(ctx, unreadable),
        "holds": await _records(ctx, "trim_holds", unreadable),
        "backups": await _records(ctx, "backups", unreadable),
        "alarms": kinds,
        "alarm_detail": detail,
        "evicted": {d: dict(sorted(n.items())) for d, n in sorted(evicted.items()) if n},
        "retention": {
            "backup_floor": ret.backup_floor,
            "backup_max_age": ret.backup_max_age,
            "backup_owner": ret.backup_owner,
            "trim_tick": ret.trim_tick,
            "wal_limit_bytes": ret.wal_limit_bytes,
            "checkpoint_interval": ret.checkpoint_interval,
            "snapshot_interval": tr.snapshot_interval,
            "min_age": tr.min_age,
            "rejoin_window": tr.rejoin_window,
        },
        "unreadable": unreadable,
    }
