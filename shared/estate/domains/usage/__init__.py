"""The usage domain: every node's usage days on every data node (ES-69, AG-47, AG-48).

Owns the tables ``usage_days`` and ``usage_spend``, the read ``usage.query`` (no writes go through
a data node: each node publishes its own days, :class:`UsagePublisher`), the record kind
``usage_day`` and the ``usage`` log (stream ``CREWLET_USAGE_LOG``, §0; compacted: one message per
subject). Deriving a day from turn records is :mod:`._derive` (pure), applying it :mod:`._apply`
(replace the object's rows; days older than 181 days leave in the same transaction), reading it
:mod:`._read`. It may import :mod:`shared.estate.log`, :mod:`shared.estate.store` and the estate's
base modules, never another domain.
"""

from __future__ import annotations

from .._seam import EstateDomain, ReadOp
from ._apply import KINDS, RETENTION_DAYS, horizon_start
from ._derive import (
    DURATION_BUCKETS,
    PAGE_READS,
    PHASES,
    DayObject,
    TurnUsage,
    company_day,
    day_bounds,
    fold_day,
    object_id,
    turn_usage,
)
from ._publish import TICK, TurnSource, UsagePublisher
from ._read import GROUP_BY, MAX_SPAN_DAYS, check_query, read_usage
from ._tables import UsageDay, UsageSpend

__all__ = [
    "DOMAIN",
    "DURATION_BUCKETS",
    "GROUP_BY",
    "MAX_SPAN_DAYS",
    "PAGE_READS",
    "PHASES",
    "RETENTION_DAYS",
    "TICK",
    "DayObject",
    "TurnSource",
    "TurnUsage",
    "UsagePublisher",
    "check_query",
    "company_day",
    "day_bounds",
    "fold_day",
    "horizon_start",
    "object_id",
    "read_usage",
    "turn_usage",
]

DOMAIN = EstateDomain(
    name="usage",
    log="usage",
    tables=(UsageDay, UsageSpend),
    reads={"usage.query": ReadOp(lambda c, r, a: read_usage(c, a))},
    apply=KINDS,
    compacted=True,
)
