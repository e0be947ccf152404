"""The two generated dashboards, panel by panel (FL-6, FL-117, ES-92, CO-21, CO-22).

:func:`fleet_dashboard` (one builder per row) and :func:`turns_dashboard`; every query names only
series the code exports. The building blocks are :mod:`crewlet._dashboard_grafana`; what is written
where is :mod:`crewlet.dashboards`.
"""

from __future__ import annotations

from typing import Any

from grafana_foundation_sdk.builders import dashboard as gd
from grafana_foundation_sdk.builders import table, tempo

from ._dashboard_grafana import (
    NODE,
    RATE,
    SEAT,
    TEMPO,
    dashboard,
    query,
    series,
    stat_panel,
    table_panel,
    to_json,
    variable,
)

__all__ = ["fleet_dashboard", "turns_dashboard"]


def fleet_dashboard() -> dict[str, Any]:
    """The ``crewlet fleet`` dashboard as Grafana JSON (FL-6, FL-117, ES-92)."""
    d = dashboard(
        "crewlet-fleet",
        "crewlet fleet",
        "The fleet as its ingress nodes see it (max over every scraped view), turns, estate, mailboxes, "
        "webhooks and alarms.",
    ).with_variable(variable("node", "label_values(crewlet_node_info, node)"))
    d = _nodes_row(d)
    d = _turns_row(d)
    d = _estate_row(d)
    d = _alarms_row(d)
    return to_json(d)


def _nodes_row(d: gd.Dashboard) -> gd.Dashboard:
    """The "Nodes" row: live nodes, view health, duties; each node's roles, epoch, seats and in flight."""
    d = d.with_row(gd.Row("Nodes"))
    d = d.with_panel(stat_panel("Live nodes", query("count(max by (node) (crewlet_node_info))", "A")))
    d = d.with_panel(
        stat_panel(
            "Fleet view readable (min over ingress nodes)", query("min(crewlet_fleet_view_readable)", "A")
        )
    )
    d = d.with_panel(stat_panel("Ingress nodes scraped up", query('sum(up{job="crewlet"})', "A")))
    d = d.with_panel(stat_panel("Duties held", query("count(max by (duty) (crewlet_duty_holder))", "A")))
    d = d.with_panel(
        table_panel(
            "Nodes: roles, broker kind, protocol, posture, config epoch, seats, in flight",
            query(
                f"max by (node, roles, broker_kind, protocol, posture) (crewlet_node_info{{{NODE}}})",
                "A",
                instant=True,
            ),
            query(f"max by (node) (crewlet_node_config_epoch{{{NODE}}})", "B", instant=True),
            query(f"max by (node) (crewlet_node_seats_held{{{NODE}}})", "C", instant=True),
            query(f"max by (node) (crewlet_node_turns_in_flight{{{NODE}}})", "D", instant=True),
            w=24,
            merge=True,
        )
    )
    d = d.with_panel(
        series(
            "Config epoch per node",
            "none",
            query(f"max by (node) (crewlet_node_config_epoch{{{NODE}}})", "A", legend="{{node}}"),
        )
    )
    d = d.with_panel(
        series(
            "Seats held per node",
            "none",
            query(f"max by (node) (crewlet_node_seats_held{{{NODE}}})", "A", legend="{{node}}"),
        )
    )
    d = d.with_panel(
        table_panel(
            "Seats: owner node and lease epoch",
            query(f"max by (seat, node) (crewlet_seat_epoch{{{NODE}}})", "A", instant=True),
        )
    )
    d = d.with_panel(
        table_panel(
            "Duties and holders",
            query(f"max by (duty, node) (crewlet_duty_holder{{{NODE}}})", "A", instant=True),
        )
    )
    return d


def _turns_row(d: gd.Dashboard) -> gd.Dashboard:
    """The "Turns and tokens" row: turns by outcome, in flight, tokens, model rounds."""
    d = d.with_row(gd.Row("Turns and tokens"))
    d = d.with_panel(
        series(
            "Turns per second by outcome",
            "ops",
            query(f"sum by (outcome) (rate(crewlet_turns_total[{RATE}]))", "A", legend="{{outcome}}"),
        )
    )
    d = d.with_panel(
        series(
            "Turns in flight per node",
            "none",
            query(f"max by (node) (crewlet_node_turns_in_flight{{{NODE}}})", "A", legend="{{node}}"),
        )
    )
    d = d.with_panel(
        series(
            "Tokens per second by kind",
            "short",
            query(f"sum by (kind) (rate(crewlet_llm_tokens_total[{RATE}]))", "A", legend="{{kind}}"),
        )
    )
    d = d.with_panel(
        series(
            "Model rounds per second by provider",
            "ops",
            query(
                f"sum by (provider_key, model) (rate(crewlet_llm_rounds_total[{RATE}]))",
                "A",
                legend="{{provider_key}} {{model}}",
            ),
        )
    )
    return d


def _estate_row(d: gd.Dashboard) -> gd.Dashboard:
    """The "Estate, mailboxes, webhooks" row: apply lag, mailbox depth, webhook intake."""
    d = d.with_row(gd.Row("Estate, mailboxes, webhooks"))
    d = d.with_panel(
        series(
            "Estate apply lag (records behind the log)",
            "none",
            query(
                f"max by (node, domain) (crewlet_estate_apply_lag_records{{{NODE}}})",
                "A",
                legend="{{node}} {{domain}}",
            ),
        )
    )
    d = d.with_panel(
        series(
            "Estate apply lag (seconds behind)",
            "s",
            query(
                f"max by (node, domain) (crewlet_estate_apply_behind_seconds{{{NODE}}})",
                "A",
                legend="{{node}} {{domain}}",
            ),
        )
    )
    d = d.with_panel(
        series(
            "Mailbox depth per seat",
            "none",
            query(
                f"max by (seat) (crewlet_mailbox_pending_messages{{{NODE}}})", "A", legend="{{seat}} pending"
            ),
            query(
                f"max by (seat) (crewlet_mailbox_ack_pending_messages{{{NODE}}})",
                "B",
                legend="{{seat}} unacked",
            ),
        )
    )
    d = d.with_panel(
        series(
            "Webhook intake per second",
            "reqps",
            query(
                f"sum by (source, outcome) (rate(crewlet_webhook_deliveries_total[{RATE}]))",
                "A",
                legend="{{source}} {{outcome}}",
            ),
        )
    )
    return d


def _alarms_row(d: gd.Dashboard) -> gd.Dashboard:
    """The "Alarms" row (ES-92, FL-154): active alarms by kind and node, and over time."""
    d = d.with_row(gd.Row("Alarms (ES-92, FL-154)"))
    d = d.with_panel(
        table_panel(
            "Alarms (1 = active) by kind and node",
            query("max by (kind, instance) (crewlet_alarm_active)", "A", instant=True),
            w=12,
        )
    )
    d = d.with_panel(
        series(
            "Active alarms over time",
            "none",
            query("sum by (kind) (crewlet_alarm_active)", "A", legend="{{kind}}"),
        )
    )
    return d


def turns_dashboard() -> dict[str, Any]:
    """The ``crewlet turns`` dashboard: turn rate and duration, and turns' traces in Tempo (CO-21, CO-22)."""
    d = dashboard(
        "crewlet-turns",
        "crewlet turns",
        "Turn rate and duration per seat; the Tempo table lists agent.turn spans, a trace id opens the trace.",
    ).with_variable(variable("seat", "label_values(crewlet_turns_total, seat)"))
    d = _turn_rate_panels(d)
    d = _model_panels(d)
    d = d.with_panel(_traces_panel())
    return to_json(d)


def _turn_rate_panels(d: gd.Dashboard) -> gd.Dashboard:
    """Turns per second by seat, turn duration p50/p95 and mean by seat (CO-21)."""
    d = d.with_panel(
        series(
            "Turns per second by seat",
            "ops",
            query(f"sum by (seat) (rate(crewlet_turns_total{{{SEAT}}}[{RATE}]))", "A", legend="{{seat}}"),
        )
    )
    d = d.with_panel(
        series(
            "Turn duration p50 / p95",
            "s",
            query(
                f"histogram_quantile(0.5, sum by (le) (rate(crewlet_turn_duration_seconds_bucket{{{SEAT}}}[{RATE}])))",
                "A",
                legend="p50",
            ),
            query(
                f"histogram_quantile(0.95, sum by (le) (rate(crewlet_turn_duration_seconds_bucket{{{SEAT}}}[{RATE}])))",
                "B",
                legend="p95",
            ),
        )
    )
    d = d.with_panel(
        series(
            "Mean turn duration by seat",
            "s",
            query(
                f"sum by (seat) (rate(crewlet_turn_duration_seconds_sum{{{SEAT}}}[{RATE}]))"
                f" / sum by (seat) (rate(crewlet_turn_duration_seconds_count{{{SEAT}}}[{RATE}]))",
                "A",
                legend="{{seat}}",
            ),
        )
    )
    return d


def _model_panels(d: gd.Dashboard) -> gd.Dashboard:
    """Model round duration, tokens by seat and kind, turn outcomes (CO-22)."""
    d = d.with_panel(
        series(
            "Model round duration p95 by provider",
            "s",
            query(
                f"histogram_quantile(0.95, sum by (le, provider_key) (rate(crewlet_llm_round_duration_seconds_bucket[{RATE}])))",
                "A",
                legend="{{provider_key}}",
            ),
        )
    )
    d = d.with_panel(
        series(
            "Tokens per second by seat and kind",
            "short",
            query(
                f"sum by (seat, kind) (rate(crewlet_llm_tokens_total{{{SEAT}}}[{RATE}]))",
                "A",
                legend="{{seat}} {{kind}}",
            ),
        )
    )
    d = d.with_panel(
        series(
            "Turn outcomes per second",
            "ops",
            query(
                f"sum by (outcome) (rate(crewlet_turns_total{{{SEAT}}}[{RATE}]))", "A", legend="{{outcome}}"
            ),
        )
    )
    return d


def _traces_panel() -> table.Panel:
    """The Tempo TraceQL table of ``agent.turn`` spans; a trace id opens its trace."""
    return (
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
