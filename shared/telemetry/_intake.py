"""Webhook intake counts and the alarm series every node starts with (FL-6, ES-92, FL-154).

- ``crewlet_webhook_deliveries_total{source, outcome}``: one per webhook request answered by an
  ingress node. ``source`` is ``github`` (``POST /webhooks/github``, CO-35) or ``webhook:<source>``
  for a configured ``integrations.webhooks`` entry (``webhook:unknown`` for a source the company does
  not configure, so the label set stays closed). ``outcome`` is one of :data:`WEBHOOK_OUTCOMES`: the
  answer's ``status`` (``accepted``, ``duplicate``, ``ignored``, ``pong``), ``rejected`` (a 4xx:
  bad signature, bad body, unknown source) or ``failed`` (a 5xx or an exception).
- ``crewlet_alarm_active{kind}`` (:mod:`shared.estate._alarms`) is set to 0 for every kind of
  :data:`ALARM_KINDS` at node start by :func:`init_alarm_series`, so alert rules and the alarm panel
  always have series.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import HTTPException
from prometheus_client import REGISTRY, Counter, Gauge

from ._metrics import default_metrics

__all__ = ["ALARM_KINDS", "WEBHOOK_OUTCOMES", "count_webhook", "init_alarm_series", "webhook_counter"]

ALARM_KINDS: tuple[str, ...] = (
    # ES-92 (estate.md §20)
    "apply_lag",
    "read_refusals",
    "barrier_slow",
    "log_headroom",
    "backup_age",
    "trim_blocked",
    "deferred_old",
    "floor_unknown",
    "search_slow",
    "search_degraded",
    "search_scoped",
    "recall_below_floor",
    "records_gated",
    "feed_unreadable",
    "maintenance_open",
    "volume_low",
    "wal_large",
    "pool_starved",
    "census_drift",
    "objects_missing",
    "estate_partition_unserved",
    "estate_view_stale",
    "history_partial",
    # FL-154 adds these two (fleet.md §26 lists the same set)
    "estate_under_replicated",
    "estate_move_stalled",
)
"""Every alarm kind of ES-92 and FL-154, in spec order."""

WEBHOOK_OUTCOMES = ("accepted", "duplicate", "ignored", "pong", "rejected", "failed")
"""The closed set of ``outcome`` label values."""

_COUNTER: Counter | None = None


def webhook_counter() -> Counter:
    """``crewlet_webhook_deliveries_total{source, outcome}`` in the process's turn registry."""
    global _COUNTER
    if _COUNTER is None:
        _COUNTER = Counter(
            "crewlet_webhook_deliveries",
            "Webhook requests answered, by source and outcome.",
            ["source", "outcome"],
            registry=default_metrics().registry,
        )
    return _COUNTER


def _outcome(result: Any) -> str:
    status: Any = None
    if isinstance(result, dict):
        status = result.get("status")
    elif hasattr(result, "body"):
        try:
            status = json.loads(bytes(result.body)).get("status")
        except (ValueError, AttributeError):
            status = None
    return status if status in WEBHOOK_OUTCOMES else "accepted"


def count_webhook(
    source_of: Callable[[dict[str, Any]], str],
) -> Callable[[Callable[..., Awaitable[Any]]], Callable[..., Awaitable[Any]]]:
    """Decorate a webhook route so each answer counts once in :func:`webhook_counter`.

    Args:
        source_of: Maps the route's keyword arguments to the ``source`` label (a closed set).

    The wrapper keeps the route's signature (FastAPI reads ``__wrapped__``) and re-raises whatever
    the route raised.
    """

    def wrap(fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        @functools.wraps(fn)
        async def route(*args: Any, **kwargs: Any) -> Any:
            try:
                source = source_of(kwargs)
            except Exception:  # noqa: BLE001 - a label must never fail the request
                source = "unknown"
            try:
                result = await fn(*args, **kwargs)
            except HTTPException as e:
                webhook_counter().labels(source, "rejected" if e.status_code < 500 else "failed").inc()
                raise
            except BaseException:
                webhook_counter().labels(source, "failed").inc()
                raise
            webhook_counter().labels(source, _outcome(result)).inc()
            return result

        return route

    return wrap


def init_alarm_series() -> None:
    """Give ``crewlet_alarm_active`` a 0 series for each of :data:`ALARM_KINDS` not set yet (ES-92)."""
    g = getattr(REGISTRY, "_names_to_collectors", {}).get("crewlet_alarm_active")
    if not isinstance(g, Gauge):  # the same gauge shared.estate's Alarms use (first maker wins)
        g = Gauge("crewlet_alarm_active", "1 while an alarm of this kind is active (ES-92)", ["kind"])
    present = {s.labels.get("kind") for fam in g.collect() for s in fam.samples}
    for kind in ALARM_KINDS:
        if kind not in present:
            g.labels(kind=kind).set(0)
