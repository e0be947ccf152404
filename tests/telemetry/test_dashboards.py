"""The generated Grafana dashboards and alert rules (FL-6, ES-92, FL-154): committed files equal a
regeneration, every PromQL names only series the code exports, names follow Prometheus conventions,
and the webhook intake counter counts outcomes. Fast: no fleet, no Prometheus (those are tests/e2e)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY, CollectorRegistry

from crewlet import dashboards
from crewlet._fleet_metrics import FleetCollector
from shared import coordination, telemetry
from shared.runtime import api_error

REPO = Path(__file__).resolve().parents[2]
BUILTIN = {"up"}
"""Series Prometheus itself makes for every target."""


def _sample_names(registry: Any) -> set[str]:
    names: set[str] = set()
    for fam in registry.collect():
        if fam.type == "counter":
            names |= {fam.name + "_total", fam.name + "_created"}
        elif fam.type == "histogram":
            names |= {fam.name + s for s in ("_bucket", "_sum", "_count", "_created")}
        else:
            names.add(fam.name)
    return names


def exported_names() -> set[str]:
    """Every sample name the node's ``/metrics`` can serve (families, not only those with samples)."""
    telemetry.webhook_counter()
    telemetry.init_alarm_series()
    names = _sample_names(telemetry.default_metrics().registry) | _sample_names(REGISTRY)
    return names | set(telemetry.FLEET_SERIES)


def test_committed_files_equal_a_regeneration() -> None:
    for path, text in dashboards.outputs().items():
        assert path.is_file(), f"{path} is missing: run python -m crewlet.dashboards"
        assert path.read_text() == text, f"{path} is stale: run python -m crewlet.dashboards"
    assert dashboards.main(["--check"]) == 0


def test_every_panel_query_names_exported_series() -> None:
    known = exported_names() | BUILTIN
    seen: set[str] = set()
    total = 0
    for name in ("crewlet-fleet", "crewlet-turns"):
        dash = json.loads((REPO / "deploy/grafana/dashboards" / f"{name}.json").read_text())
        for title, ref, expr in dashboards.panel_queries(dash):
            total += 1
            names = dashboards.metric_names(expr)
            assert names, f"{name} / {title} / {ref}: no metric in {expr!r}"
            assert names <= known, f"{name} / {title} / {ref}: unknown series {sorted(names - known)}"
            seen |= names
    assert total >= 20
    # the list: nodes, seats, duties, turns, tokens, estate lag, mailbox, webhooks, alarms
    for needed in (
        "crewlet_node_info",
        "crewlet_node_config_epoch",
        "crewlet_seat_epoch",
        "crewlet_duty_holder",
        "crewlet_turns_total",
        "crewlet_llm_tokens_total",
        "crewlet_estate_apply_lag_records",
        "crewlet_mailbox_pending_messages",
        "crewlet_webhook_deliveries_total",
        "crewlet_alarm_active",
    ):
        assert needed in seen, f"no panel shows {needed}"


def test_metric_names_sees_through_promql() -> None:
    expr = 'histogram_quantile(0.9, sum by (le, seat) (rate(a_bucket{seat=~"x|y"}[5m]))) / on (seat) b > 1e3'
    assert dashboards.metric_names(expr) == {"a_bucket", "b"}
    assert dashboards.metric_names("crewlet_no_such_metric_total") - exported_names() == {
        "crewlet_no_such_metric_total"
    }


def test_names_follow_prometheus_conventions() -> None:
    units = ("_seconds", "_bytes", "_records", "_messages", "_total", "_info", "_epoch")
    for fam in telemetry.default_metrics().registry.collect():
        assert fam.name.startswith("crewlet_"), fam.name
        if fam.type == "histogram":
            assert fam.name.endswith("_seconds"), f"{fam.name}: a histogram names its unit"
    for name, (_help, labels) in telemetry.FLEET_SERIES.items():
        assert name.startswith("crewlet_"), name
        assert not name.endswith("_total"), f"{name}: a gauge is not a _total"
        assert "id" not in labels and "event_id" not in labels, f"{name}: no id labels"
    info = [n for n in telemetry.FLEET_SERIES if n.endswith("_info")]
    assert info == ["crewlet_node_info"]
    assert any(n.endswith(units) for n in telemetry.FLEET_SERIES)


def test_alert_rules_cover_every_alarm_kind_and_node_down() -> None:
    doc = yaml.safe_load((REPO / "deploy/prometheus/alerts.yaml").read_text())
    rules = doc["groups"][0]["rules"]
    kinds = {r["labels"].get("alarm") for r in rules if "alarm" in r["labels"]}
    assert kinds == set(telemetry.ALARM_KINDS)
    assert len(telemetry.ALARM_KINDS) == len(set(telemetry.ALARM_KINDS)) == 25
    assert any(r["expr"] == 'up{job="crewlet"} == 0' for r in rules)
    prom = yaml.safe_load((REPO / "deploy/prometheus/prometheus.yml").read_text())
    assert prom["rule_files"] == ["alerts.yaml"]
    assert prom["scrape_configs"][0]["static_configs"][0]["targets"] == [
        "node-1:8080",
        "node-2:8080",
        "node-3:8080",
    ]


def test_grafana_provisions_both_data_sources_with_the_dashboards_uids() -> None:
    prov = REPO / "deploy/grafana/provisioning"
    sources = [
        ds
        for f in sorted((prov / "datasources").glob("*.yaml"))
        for ds in yaml.safe_load(f.read_text())["datasources"]
    ]
    assert {ds["uid"] for ds in sources} == {dashboards.PROMETHEUS_UID, dashboards.TEMPO_UID}
    assert sum(1 for ds in sources if ds.get("isDefault")) == 1
    providers = yaml.safe_load((prov / "dashboards/crewlet.yaml").read_text())["providers"]
    assert providers[0]["options"]["path"] == "/var/lib/grafana/dashboards"
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    assert (
        "./deploy/grafana/dashboards:/var/lib/grafana/dashboards:ro"
        in compose["services"]["grafana"]["volumes"]
    )
    assert compose["services"]["prometheus"]["image"].startswith("prom/prometheus:v3.")


def test_every_alarm_kind_has_a_zero_series_from_the_start() -> None:
    telemetry.init_alarm_series()
    values = {
        s.labels["kind"]: s.value
        for fam in REGISTRY.collect()
        if fam.name == "crewlet_alarm_active"
        for s in fam.samples
    }
    assert set(telemetry.ALARM_KINDS) <= set(values)


def test_webhook_intake_counts_each_outcome() -> None:
    app = FastAPI()

    @app.post("/hook/{kind}")
    @telemetry.count_webhook(lambda kw: "webhook:test-" + kw["kind"][:1])
    async def hook(kind: str) -> Any:
        if kind == "bad":
            raise api_error(401, "bad_signature", "no")
        if kind == "dup":
            return JSONResponse({"status": "duplicate"}, status_code=200)
        return {"status": "accepted"}

    counter = telemetry.webhook_counter()

    def value(source: str, outcome: str) -> float:
        return float(counter.labels(source, outcome)._value.get())

    before = {
        k: value(f"webhook:test-{k[0]}", o)
        for k, o in (("ok", "accepted"), ("dup", "duplicate"), ("bad", "rejected"))
    }
    with TestClient(app) as c:
        assert c.post("/hook/ok").status_code == 200
        assert c.post("/hook/dup").json() == {"status": "duplicate"}
        assert c.post("/hook/bad").status_code == 401
    assert value("webhook:test-o", "accepted") == before["ok"] + 1
    assert value("webhook:test-d", "duplicate") == before["dup"] + 1
    assert value("webhook:test-b", "rejected") == before["bad"] + 1


def test_fleet_collector_reads_the_lease_store_and_caches() -> None:
    async def run() -> tuple[str, str]:
        coord = coordination.MemoryCoordination()
        ctx = SimpleNamespace(coord=coord, extras={}, seats_held={}, node_id="n1")
        col = FleetCollector(ctx, cache_seconds=60)
        reg = CollectorRegistry()
        reg.register(col)
        await col.refresh()
        from prometheus_client import generate_latest

        first = generate_latest(reg).decode()
        ctx.coord = None  # a cached view answers without asking again
        await col.refresh()
        return first, generate_latest(reg).decode()

    first, cached = asyncio.run(run())
    assert "crewlet_fleet_view_readable 1.0" in first
    assert cached == first


@pytest.mark.parametrize("coord", [None])
def test_fleet_collector_without_a_store_reads_unreadable(coord: Any) -> None:
    ctx = SimpleNamespace(coord=coord, extras={}, seats_held={}, node_id="n1")
    col = FleetCollector(ctx, cache_seconds=0)
    asyncio.run(col.refresh())
    fams = {f.name: f for f in col.collect()}
    assert [s.value for s in fams["crewlet_fleet_view_readable"].samples] == [0.0]
    assert "crewlet_node_info" not in fams
