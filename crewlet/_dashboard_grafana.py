"""The Grafana building blocks of the generated dashboards (FL-6): data sources, queries, panels.

Thin wrappers over ``grafana_foundation_sdk`` so every panel of :mod:`crewlet._dashboard_boards` is
one call; :func:`to_json` is the JSON written to ``deploy/grafana/dashboards``.
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus as gp
from grafana_foundation_sdk.builders import stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, DataTransformerConfig
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

__all__ = [
    "NODE",
    "PROM",
    "PROMETHEUS_UID",
    "RATE",
    "SEAT",
    "TEMPO",
    "TEMPO_UID",
    "dashboard",
    "query",
    "series",
    "stat_panel",
    "table_panel",
    "to_json",
    "variable",
]

PROMETHEUS_UID = "prometheus"
"""The provisioned Prometheus data source's uid (deploy/grafana/provisioning/datasources)."""
TEMPO_UID = "tempo"
"""The provisioned Tempo data source's uid."""
PROM = DataSourceRef(type_val="prometheus", uid=PROMETHEUS_UID)
TEMPO = DataSourceRef(type_val="tempo", uid=TEMPO_UID)
RATE = "$__rate_interval"
NODE = 'node=~"$node"'
SEAT = 'seat=~"$seat"'


def query(expr: str, ref: str, *, legend: str = "", instant: bool = False) -> gp.Dataquery:
    """A Prometheus query ``ref``: a range query, or an instant one formatted as a table."""
    q = gp.Dataquery().expr(expr).ref_id(ref).datasource(PROM)
    if legend:
        q = q.legend_format(legend)
    return q.instant().format(PromQueryFormat.TABLE) if instant else q.range()


def series(title: str, unit: str, *queries: gp.Dataquery, w: int = 12, h: int = 8) -> timeseries.Panel:
    """A time series panel of ``queries`` in ``unit``, ``w`` columns wide and ``h`` rows high."""
    p = timeseries.Panel().title(title).datasource(PROM).unit(unit).span(w).height(h)
    for q in queries:
        p = p.with_target(q)
    return p


def table_panel(
    title: str, *queries: gp.Dataquery, w: int = 12, h: int = 8, merge: bool = False
) -> table.Panel:
    """A table of instant ``queries`` (merged into one row per series when ``merge``), without Time."""
    p = table.Panel().title(title).datasource(PROM).span(w).height(h)
    for q in queries:
        p = p.with_target(q)
    if merge:
        p = p.with_transformation(DataTransformerConfig(id_val="merge", options={}))
    p = p.with_transformation(
        DataTransformerConfig(id_val="organize", options={"excludeByName": {"Time": True}})
    )
    return p


def stat_panel(title: str, query: gp.Dataquery, *, w: int = 6, h: int = 4) -> stat.Panel:
    """A single-stat panel of ``query``."""
    return stat.Panel().title(title).datasource(PROM).span(w).height(h).with_target(query)


def variable(name: str, query: str) -> gd.QueryVariable:
    """A multi-value dashboard variable ``name`` (``All`` is ``.*``) from a label_values ``query``."""
    return (
        gd.QueryVariable(name)
        .label(name)
        .datasource(PROM)
        .query(query)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )


def dashboard(uid: str, title: str, description: str) -> gd.Dashboard:
    """An empty read-only crewlet dashboard: tag ``crewlet``, 10 s refresh, the last hour."""
    return (
        gd.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["crewlet"])
        .refresh("10s")
        .time("now-1h", "now")
        .timezone("browser")
        .readonly()
    )


def to_json(d: gd.Dashboard) -> dict[str, Any]:
    """The dashboard as Grafana JSON, panels numbered 1.. in order (Grafana wants distinct ids)."""
    out: dict[str, Any] = json.loads(json.dumps(d.build(), cls=JSONEncoder))
    for i, panel in enumerate(out["panels"], start=1):  # Grafana wants distinct panel ids
        panel["id"] = i
    return out
