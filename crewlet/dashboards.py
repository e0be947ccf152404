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

The dashboards are built in :mod:`crewlet._dashboard_boards` (one builder per row) from the blocks of
:mod:`crewlet._dashboard_grafana`; the alert rules, their tests and the writer are here.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

from shared.telemetry import ALARM_KINDS

from ._dashboard_boards import fleet_dashboard, turns_dashboard
from ._dashboard_grafana import PROMETHEUS_UID, TEMPO_UID

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
