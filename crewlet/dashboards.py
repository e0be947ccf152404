"""Generate the Grafana dashboards and Prometheus alert rules of ``deploy/`` (FL-6, ES-92, FL-154).

``python -m crewlet.dashboards`` (re)writes:

- ``deploy/grafana/dashboards/crewlet-fleet.json``: nodes (roles, broker kind, protocol, posture, config
  epoch), seats per node and their epochs, duty holders, turns per second by outcome, tokens, estate apply
  lag, mailbox depth, webhook intake, alarms, scrape health;
- ``deploy/grafana/dashboards/crewlet-turns.json``: turn rate and duration, model rounds and tokens, and a
  Tempo TraceQL table of ``agent.turn`` spans whose trace ids open the trace;
- ``deploy/prometheus/alerts.yaml``: one rule per alarm kind of :data:`shared.telemetry.ALARM_KINDS`
  (``crewlet_alarm_active{kind} > 0``), one for a node that stops answering scrapes (``up == 0``), one
  for an unreadable fleet view;
- ``deploy/prometheus/alerts.test.yaml``: ``promtool test rules`` cases for each rule (fires; a 0 does not).

Dashboards are built with ``grafana_foundation_sdk``; every PromQL names only series the code exports
(checked by ``tests/telemetry/test_dashboards.py``) and answers on a running fleet (``tests/e2e``).
``--check`` exits 1 naming the files that differ instead of writing.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml
from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import prometheus as gp
from grafana_foundation_sdk.builders import stat, table, tempo, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef, DataTransformerConfig
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

from shared.telemetry import ALARM_KINDS

__all__ = [
    "PROMETHEUS_UID",
    "TEMPO_UID",
    "alert_rules",
    "alert_tests",
    "fleet_dashboard",
    "metric_names",
    "outputs",
    "panel_queries",
    "turns_dashboard",
]

REPO = Path(__file__).resolve().parent.parent
PROMETHEUS_UID = "prometheus"
"""The provisioned Prometheus data source's uid (deploy/grafana/provisioning/datasources)."""
TEMPO_UID = "tempo"
"""The provisioned Tempo data source's uid."""
PROM = DataSourceRef(type_val="prometheus", uid=PROMETHEUS_UID)
TEMPO = DataSourceRef(type_val="tempo", uid=TEMPO_UID)
RATE = "$__rate_interval"
NODE = 'node=~"$node"'
SEAT = 'seat=~"$seat"'


def _q(expr: str, ref: str, *, legend: str = "", instant: bool = False) -> gp.Dataquery:
    q = gp.Dataquery().expr(expr).ref_id(ref).datasource(PROM)
    if legend:
        q = q.legend_format(legend)
    return q.instant().format(PromQueryFormat.TABLE) if instant else q.range()


def _series(title: str, unit: str, *queries: gp.Dataquery, w: int = 12, h: int = 8) -> timeseries.Panel:
    p = timeseries.Panel().title(title).datasource(PROM).unit(unit).span(w).height(h)
    for q in queries:
        p = p.with_target(q)
    return p


def _table(title: str, *queries: gp.Dataquery, w: int = 12, h: int = 8, merge: bool = False) -> table.Panel:
    p = table.Panel().title(title).datasource(PROM).span(w).height(h)
    for q in queries:
        p = p.with_target(q)
    if merge:
        p = p.with_transformation(DataTransformerConfig(id_val="merge", options={}))
    p = p.with_transformation(
        DataTransformerConfig(id_val="organize", options={"excludeByName": {"Time": True}})
    )
    return p


def _stat(title: str, query: gp.Dataquery, *, w: int = 6, h: int = 4) -> stat.Panel:
    return stat.Panel().title(title).datasource(PROM).span(w).height(h).with_target(query)


def _var(name: str, query: str) -> gd.QueryVariable:
    return (
        gd.QueryVariable(name)
        .label(name)
        .datasource(PROM)
        .query(query)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )


def _dashboard(uid: str, title: str, description: str) -> gd.Dashboard:
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


def fleet_dashboard() -> dict[str, Any]:
    """The ``crewlet fleet`` dashboard as Grafana JSON (FL-6, FL-117, ES-92)."""
    d = _dashboard(
        "crewlet-fleet",
        "crewlet fleet",
        "The fleet as its ingress nodes see it (max over every scraped view), turns, estate, mailboxes, "
        "webhooks and alarms.",
    ).with_variable(_var("node", "label_values(crewlet_node_info, node)"))
    d = d.with_row(gd.Row("Nodes"))
    d = d.with_panel(_stat("Live nodes", _q("count(max by (node) (crewlet_node_info))", "A")))
    d = d.with_panel(
        _stat("Fleet view readable (min over ingress nodes)", _q("min(crewlet_fleet_view_readable)", "A"))
    )
    d = d.with_panel(_stat("Ingress nodes scraped up", _q('sum(up{job="crewlet"})', "A")))
    d = d.with_panel(_stat("Duties held", _q("count(max by (duty) (crewlet_duty_holder))", "A")))
    d = d.with_panel(
        _table(
            "Nodes: roles, broker kind, protocol, posture, config epoch, seats, in flight",
            _q(
                f"max by (node, roles, broker_kind, protocol, posture) (crewlet_node_info{{{NODE}}})",
                "A",
                instant=True,
            ),
            _q(f"max by (node) (crewlet_node_config_epoch{{{NODE}}})", "B", instant=True),
            _q(f"max by (node) (crewlet_node_seats_held{{{NODE}}})", "C", instant=True),
            _q(f"max by (node) (crewlet_node_turns_in_flight{{{NODE}}})", "D", instant=True),
            w=24,
            merge=True,
        )
    )
    d = d.with_panel(
        _series(
            "Config epoch per node",
            "none",
            _q(f"max by (node) (crewlet_node_config_epoch{{{NODE}}})", "A", legend="{{node}}"),
        )
    )
    d = d.with_panel(
        _series(
            "Seats held per node",
            "none",
            _q(f"max by (node) (crewlet_node_seats_held{{{NODE}}})", "A", legend="{{node}}"),
        )
    )
    d = d.with_panel(
        _table(
            "Seats: owner node and lease epoch",
            _q(f"max by (seat, node) (crewlet_seat_epoch{{{NODE}}})", "A", instant=True),
        )
    )
    d = d.with_panel(
        _table(
            "Duties and holders",
            _q(f"max by (duty, node) (crewlet_duty_holder{{{NODE}}})", "A", instant=True),
        )
    )
    d = d.with_row(gd.Row("Turns and tokens"))
    d = d.with_panel(
        _series(
            "Turns per second by outcome",
            "ops",
            _q(f"sum by (outcome) (rate(crewlet_turns_total[{RATE}]))", "A", legend="{{outcome}}"),
        )
    )
    d = d.with_panel(
        _series(
            "Turns in flight per node",
            "none",
            _q(f"max by (node) (crewlet_node_turns_in_flight{{{NODE}}})", "A", legend="{{node}}"),
        )
    )
    d = d.with_panel(
        _series(
            "Tokens per second by kind",
            "short",
            _q(f"sum by (kind) (rate(crewlet_llm_tokens_total[{RATE}]))", "A", legend="{{kind}}"),
        )
    )
    d = d.with_panel(
        _series(
            "Model rounds per second by provider",
            "ops",
            _q(
                f"sum by (provider_key, model) (rate(crewlet_llm_rounds_total[{RATE}]))",
                "A",
                legend="{{provider_key}} {{model}}",
            ),
        )
    )
    d = d.with_row(gd.Row("Estate, mailboxes, webhooks"))
    d = d.with_panel(
        _series(
            "Estate apply lag (records behind the log)",
            "none",
            _q(
                f"max by (node, domain) (crewlet_estate_apply_lag_records{{{NODE}}})",
                "A",
                legend="{{node}} {{domain}}",
            ),
        )
    )
    d = d.with_panel(
        _series(
            "Estate apply lag (seconds behind)",
            "s",
            _q(
                f"max by (node, domain) (crewlet_estate_apply_behind_seconds{{{NODE}}})",
                "A",
                legend="{{node}} {{domain}}",
            ),
        )
    )
    d = d.with_panel(
        _series(
            "Mailbox depth per seat",
            "none",
            _q(f"max by (seat) (crewlet_mailbox_pending_messages{{{NODE}}})", "A", legend="{{seat}} pending"),
            _q(
                f"max by (seat) (crewlet_mailbox_ack_pending_messages{{{NODE}}})",
                "B",
                legend="{{seat}} unacked",
            ),
        )
    )
    d = d.with_panel(
        _series(
            "Webhook intake per second",
            "reqps",
            _q(
                f"sum by (source, outcome) (rate(crewlet_webhook_deliveries_total[{RATE}]))",
                "A",
                legend="{{source}} {{outcome}}",
            ),
        )
    )
    d = d.with_row(gd.Row("Alarms (ES-92, FL-154)"))
    d = d.with_panel(
        _table(
            "Alarms (1 = active) by kind and node",
            _q("max by (kind, instance) (crewlet_alarm_active)", "A", instant=True),
            w=12,
        )
    )
    d = d.with_panel(
        _series(
            "Active alarms over time",
            "none",
            _q("sum by (kind) (crewlet_alarm_active)", "A", legend="{{kind}}"),
        )
    )
    return _json(d)


def turns_dashboard() -> dict[str, Any]:
    """The ``crewlet turns`` dashboard: turn rate and duration, and turns' traces in Tempo (CO-21, CO-22)."""
    d = _dashboard(
        "crewlet-turns",
        "crewlet turns",
        "Turn rate and duration per seat; the Tempo table lists agent.turn spans, a trace id opens the trace.",
    ).with_variable(_var("seat", "label_values(crewlet_turns_total, seat)"))
    d = d.with_panel(
        _series(
            "Turns per second by seat",
            "ops",
            _q(f"sum by (seat) (rate(crewlet_turns_total{{{SEAT}}}[{RATE}]))", "A", legend="{{seat}}"),
        )
    )
    d = d.with_panel(
        _series(
            "Turn duration p50 / p95",
            "s",
            _q(
                f"histogram_quantile(0.5, sum by (le) (rate(crewlet_turn_duration_seconds_bucket{{{SEAT}}}[{RATE}])))",
                "A",
                legend="p50",
            ),
            _q(
                f"histogram_quantile(0.95, sum by (le) (rate(crewlet_turn_duration_seconds_bucket{{{SEAT}}}[{RATE}])))",
                "B",
                legend="p95",
            ),
        )
    )
    d = d.with_panel(
        _series(
            "Mean turn duration by seat",
            "s",
            _q(
                f"sum by (seat) (rate(crewlet_turn_duration_seconds_sum{{{SEAT}}}[{RATE}]))"
                f" / sum by (seat) (rate(crewlet_turn_duration_seconds_count{{{SEAT}}}[{RATE}]))",
                "A",
                legend="{{seat}}",
            ),
        )
    )
    d = d.with_panel(
        _series(
            "Model round duration p95 by provider",
            "s",
            _q(
                f"histogram_quantile(0.95, sum by (le, provider_key) (rate(crewlet_llm_round_duration_seconds_bucket[{RATE}])))",
                "A",
                legend="{{provider_key}}",
            ),
        )
    )
    d = d.with_panel(
        _series(
            "Tokens per second by seat and kind",
            "short",
            _q(
                f"sum by (seat, kind) (rate(crewlet_llm_tokens_total{{{SEAT}}}[{RATE}]))",
                "A",
                legend="{{seat}} {{kind}}",
            ),
        )
    )
    d = d.with_panel(
        _series(
            "Turn outcomes per second",
            "ops",
            _q(f"sum by (outcome) (rate(crewlet_turns_total{{{SEAT}}}[{RATE}]))", "A", legend="{{outcome}}"),
        )
    )
    traces = (
        table.Panel()
        .title("Recent turns in Tempo (agent.turn spans; a trace id opens its trace)")
        .datasource(TEMPO)
        .span(24)
        .height(12)
        .with_target(
            tempo.TempoQuery()
            .ref_id("A")
            .datasource(TEMPO)
            .query_type("traceql")
            .query('{ name = "agent.turn" }')
            .limit(50)
        )
    )
    d = d.with_panel(traces)
    return _json(d)


def _json(d: gd.Dashboard) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(d.build(), cls=JSONEncoder))
    for i, panel in enumerate(out["panels"], start=1):  # Grafana wants distinct panel ids
        panel["id"] = i
    return out


def _alert_name(kind: str) -> str:
    return "Crewlet" + "".join(p.capitalize() for p in kind.split("_"))


def alert_rules() -> dict[str, Any]:
    """The Prometheus rules file: an alert per alarm kind (ES-92, FL-154), node down, fleet view unreadable."""
    rules: list[dict[str, Any]] = [
        {
            "alert": "CrewletNodeDown",
            "expr": 'up{job="crewlet"} == 0',
            "for": "1m",
            "labels": {"severity": "critical"},
            "annotations": {"summary": "crewlet node {{ $labels.instance }} does not answer /metrics"},
        },
        {
            "alert": "CrewletFleetViewUnreadable",
            "expr": "crewlet_fleet_view_readable == 0",
            "for": "1m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "{{ $labels.instance }} cannot read the lease store (GET /fleet answers 503)"
            },
        },
    ]
    for kind in ALARM_KINDS:
        rules.append(
            {
                "alert": _alert_name(kind),
                "expr": f'max by (instance, kind) (crewlet_alarm_active{{kind="{kind}"}}) > 0',
                "for": "1m",
                "labels": {"severity": "warning", "alarm": kind},
                "annotations": {
                    "summary": f"alarm {kind} is active on {{{{ $labels.instance }}}} (ES-92, FL-154)",
                },
            }
        )
    return {"groups": [{"name": "crewlet", "rules": rules}]}


def alert_tests() -> dict[str, Any]:
    """``promtool test rules`` cases: every rule fires on its input, and a kind at 0 does not fire."""
    node = {"instance": "node-1:8080", "job": "crewlet"}
    series = [
        {"series": 'up{instance="node-1:8080",job="crewlet"}', "values": "0x5"},
        {"series": 'up{instance="node-2:8080",job="crewlet"}', "values": "1x5"},
        {"series": 'crewlet_fleet_view_readable{instance="node-1:8080",job="crewlet"}', "values": "0x5"},
    ]
    for kind in ALARM_KINDS:
        series.append(
            {
                "series": f'crewlet_alarm_active{{instance="node-1:8080",job="crewlet",kind="{kind}"}}',
                "values": "1x5",
            }
        )
        series.append(
            {
                "series": f'crewlet_alarm_active{{instance="node-2:8080",job="crewlet",kind="{kind}"}}',
                "values": "0x5",
            }
        )
    alerts: list[dict[str, Any]] = [
        {
            "eval_time": "2m",
            "alertname": "CrewletNodeDown",
            "exp_alerts": [
                {
                    "exp_labels": {**node, "severity": "critical"},
                    "exp_annotations": {"summary": "crewlet node node-1:8080 does not answer /metrics"},
                }
            ],
        },
        {
            "eval_time": "2m",
            "alertname": "CrewletFleetViewUnreadable",
            "exp_alerts": [
                {
                    "exp_labels": {**node, "severity": "warning"},
                    "exp_annotations": {
                        "summary": "node-1:8080 cannot read the lease store (GET /fleet answers 503)"
                    },
                }
            ],
        },
        {"eval_time": "30s", "alertname": "CrewletNodeDown", "exp_alerts": []},  # "for: 1m" not yet met
    ]
    for kind in ALARM_KINDS:
        alerts.append(
            {
                "eval_time": "2m",
                "alertname": _alert_name(kind),
                "exp_alerts": [
                    {
                        "exp_labels": {
                            "instance": "node-1:8080",
                            "kind": kind,
                            "alarm": kind,
                            "severity": "warning",
                        },
                        "exp_annotations": {
                            "summary": f"alarm {kind} is active on node-1:8080 (ES-92, FL-154)"
                        },
                    }
                ],
            }
        )
    return {
        "rule_files": ["alerts.yaml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "alert_rule_test": alerts}],
    }


_PROMQL_WORDS = {
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "bool",
    "offset",
    "and",
    "or",
    "unless",
}


def panel_queries(dash: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Every Prometheus target of ``dash``: ``(panel title, refId, PromQL)`` (rows and Tempo targets skipped)."""
    out = []
    for panel in dash["panels"]:
        for t in panel.get("targets") or []:
            if (t.get("datasource") or panel.get("datasource") or {}).get("uid") == PROMETHEUS_UID and t.get(
                "expr"
            ):
                out.append((str(panel["title"]), str(t.get("refId", "")), str(t["expr"])))
    return out


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords and label names left out)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # strings
    s = re.sub(r"\{[^}]*\}", "", s)  # label matchers
    s = re.sub(r"\[[^]]*\]", "", s)  # range selectors
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", s)  # grouping labels
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", s):
        rest = s[m.end() :].lstrip()
        if rest.startswith("(") or m.group() in _PROMQL_WORDS:
            continue
        if m.start() > 0 and (s[m.start() - 1].isdigit() or s[m.start() - 1] == "."):
            continue  # the exponent or unit of a number
        names.add(m.group())
    return names


def _yaml(doc: dict[str, Any], head: str) -> str:
    return head + yaml.safe_dump(doc, sort_keys=False, width=120)


def outputs() -> dict[Path, str]:
    """Every generated file (path under the repository → its text)."""
    gen = "# Generated by `python -m crewlet.dashboards` from crewlet/dashboards.py: do not edit.\n"
    return {
        REPO / "deploy/grafana/dashboards/crewlet-fleet.json": json.dumps(fleet_dashboard(), indent=2) + "\n",
        REPO / "deploy/grafana/dashboards/crewlet-turns.json": json.dumps(turns_dashboard(), indent=2) + "\n",
        REPO / "deploy/prometheus/alerts.yaml": _yaml(alert_rules(), gen),
        REPO / "deploy/prometheus/alerts.test.yaml": _yaml(
            alert_tests(), gen + "# Run: promtool test rules alerts.test.yaml\n"
        ),
    }


def main(argv: list[str] | None = None) -> int:
    """Write the files (exit 0), or with ``--check`` exit 1 naming those that differ."""
    ap = argparse.ArgumentParser(prog="python -m crewlet.dashboards", description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    args = ap.parse_args(argv)
    stale = []
    for path, text in outputs().items():
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(str(path.relative_to(REPO)))
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if stale:
        print("stale (run python -m crewlet.dashboards): " + ", ".join(stale), file=sys.stderr)
        return 1
    done = "current" if args.check else "written"
    print(f"{len(outputs())} files {done}: " + ", ".join(str(p.relative_to(REPO)) for p in outputs()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
