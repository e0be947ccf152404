"""Debian's Prometheus against the committed files and a real 3-node fleet (FL-6, ES-92, FL-154).

1. ``promtool check config`` / ``check rules`` / ``test rules`` on ``deploy/prometheus``.
2. A 3-member cluster and three nodes (:class:`tests.fleet.harness.Fleet`, booted like
   ``tests/fleet/conftest.py``), a real ``prometheus`` on a free loopback port with a config derived
   from the committed ``prometheus.yml`` (only the targets and the intervals replaced: scrape every 1 s),
   its own storage directory; traffic (messages so turns run, a signed GitHub delivery); then every
   Prometheus target of both committed dashboards, evaluated through the HTTP API, returns series.
   Every process is stopped by PID in a finalizer.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from crewlet import dashboards
from tests.e2e.conftest import debian_binary
from tests.fleet.harness import Fleet, wait_for
from tests.support.procs import Proc, free_port

REPO = Path(__file__).resolve().parents[2]
PROM_DIR = REPO / "deploy" / "prometheus"
DASHBOARDS = ("crewlet-fleet", "crewlet-turns")
VARIABLES = {"$node": ".*", "$seat": ".*", "$__rate_interval": "1m"}
"""Template variables → what a query is evaluated with (the variables' "All", a 1-minute rate window)."""


def _promtool(*args: str, cwd: Path = PROM_DIR) -> str:
    r = subprocess.run(
        [debian_binary("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, f"promtool {' '.join(args)}: {r.stdout}{r.stderr}"
    return r.stdout + r.stderr


def test_promtool_accepts_the_committed_config_and_rules() -> None:
    assert "SUCCESS" in _promtool("check", "config", "prometheus.yml")
    out = _promtool("check", "rules", "alerts.yaml")
    assert "27 rules found" in out, out
    assert "SUCCESS" in _promtool("test", "rules", "alerts.test.yaml")


def test_promtool_fails_a_wrong_expectation(tmp_path: Path) -> None:
    """The rule tests can fail: expecting an alarm at 0 to fire is reported as a failure."""
    shutil.copy(PROM_DIR / "alerts.yaml", tmp_path / "alerts.yaml")
    doc = yaml.safe_load((PROM_DIR / "alerts.test.yaml").read_text())
    case = doc["tests"][0]["alert_rule_test"][-1]
    case["exp_alerts"][0]["exp_labels"]["instance"] = "node-2:8080"  # node-2's alarms are all 0
    (tmp_path / "wrong.test.yaml").write_text(yaml.safe_dump(doc))
    r = subprocess.run(
        [debian_binary("promtool"), "test", "rules", "wrong.test.yaml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0 and "FAILED" in (r.stdout + r.stderr)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    """Three converged nodes ``a``, ``b``, ``c`` (all roles) on a 3-member cluster, booted together."""
    f = Fleet(tmp_path_factory.mktemp("fleet"))
    try:
        f.boot()  # all three at once, as an orchestrator starts them
        f.wait_converged(60)
        yield f
    finally:
        f.stop()


class Prometheus:
    """A Debian ``prometheus`` process on loopback, stopped by PID."""

    def __init__(self, root: Path, targets: list[str]) -> None:
        cfg = yaml.safe_load((PROM_DIR / "prometheus.yml").read_text())
        cfg["global"]["scrape_interval"] = "1s"
        cfg["global"]["evaluation_interval"] = "1s"
        for job in cfg["scrape_configs"]:
            job["static_configs"] = [{"targets": targets}]
        root.mkdir(parents=True, exist_ok=True)
        shutil.copy(PROM_DIR / "alerts.yaml", root / "alerts.yaml")  # rule_files is relative to the config
        (root / "prometheus.yml").write_text(yaml.safe_dump(cfg))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = Proc(
            [
                debian_binary("prometheus"),
                f"--config.file={root / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
            ],
            log=root / "prometheus.log",
            cwd=root,
        )

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/-/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            assert self.proc.popen.poll() is None, f"prometheus exited: {self.proc.output()[-2000:]}"
            return False

    def api(self, path: str, **params: Any) -> Any:
        r = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=10)
        assert r.status_code == 200, f"{path} {params}: {r.status_code} {r.text}"
        body = r.json()
        assert body["status"] == "success", body
        return body["data"]

    def series(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` evaluates to now (a list of ``{metric, value}``)."""
        data = self.api("query", query=expr)
        assert data["resultType"] in ("vector", "scalar"), data
        return list(data["result"]) if data["resultType"] == "vector" else [data["result"]]


@pytest.fixture(scope="module")
def prom(fleet: Fleet, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    """Prometheus scraping the three nodes every second, with the committed rules."""
    targets = [n.url.removeprefix("http://") for n in fleet.nodes.values()]
    p = Prometheus(tmp_path_factory.mktemp("prometheus"), targets)
    try:
        wait_for("prometheus ready", p.ready, timeout=30, every=0.25)
        yield p
    finally:
        p.proc.stop(grace=10)


def _queries() -> list[tuple[str, str, str, str]]:
    out = []
    for name in DASHBOARDS:
        dash = json.loads((REPO / "deploy/grafana/dashboards" / f"{name}.json").read_text())
        for title, ref, expr in dashboards.panel_queries(dash):
            for var, value in VARIABLES.items():
                expr = expr.replace(var, value)
            assert "$" not in expr, f"{name} / {title}: an unreplaced variable in {expr!r}"
            out.append((name, title, ref, expr))
    return out


def test_every_panel_query_returns_series(fleet: Fleet, prom: Prometheus) -> None:
    started = time.monotonic()
    up = wait_for(
        "all three nodes scraped up",
        lambda: len([s for s in prom.series('up{job="crewlet"} == 1')]) == 3,
        timeout=30,
        every=0.5,
    )
    assert up
    # traffic: a turn on several seats (they spread over the nodes), and a signed GitHub delivery
    events = [
        fleet.post_message(seat, f"metrics check {seat}") for seat in ("lead", "dev", "docs", "qa", "sre")
    ]
    r = fleet.post_github("a", f"prom-{int(time.time() * 1000)}")
    assert r.status_code == 202, r.text
    fleet.wait_handled(*events, r.json()["event_id"], timeout=60)

    queries = _queries()
    assert len(queries) >= 25
    missing: dict[str, str] = {}

    def all_answer() -> bool:
        missing.clear()
        for name, title, ref, expr in queries:
            if not prom.series(expr):
                missing[f"{name} / {title} / {ref}"] = expr
        return not missing

    try:
        wait_for("every panel answered", all_answer, timeout=60, every=1.0)
    except AssertionError:
        raise AssertionError(f"panels with no series: {json.dumps(missing, indent=1)}") from None

    # the fleet as the dashboard shows it: three nodes, nine seats with epochs, every alarm kind at 0
    nodes = prom.series("max by (node, roles, broker_kind, posture) (crewlet_node_info)")
    assert {s["metric"]["node"] for s in nodes} == set(fleet.names)
    assert all(s["metric"]["roles"] == "data,ingress,seats,workers" for s in nodes)
    assert all(s["metric"]["broker_kind"] in ("member", "leaf", "client") for s in nodes), nodes
    seats = prom.series("max by (seat, node) (crewlet_seat_epoch)")
    assert {s["metric"]["seat"] for s in seats} == set(fleet.seats)
    alarms = prom.series("max by (kind) (crewlet_alarm_active)")
    assert len(alarms) >= 25
    hooks = prom.series('sum by (outcome) (crewlet_webhook_deliveries_total{source="webhook:github"})')
    assert {s["metric"]["outcome"] for s in hooks} == {"accepted"}
    turns = prom.series("sum(crewlet_turns_total)")
    assert float(turns[0]["value"][1]) >= len(events)
    # the dashboards' variables have values
    assert set(prom.api("label/node/values", **{"match[]": "crewlet_node_info"})) == set(fleet.names)
    assert prom.api("label/seat/values", **{"match[]": "crewlet_turns_total"})
    # the committed rules are loaded, and a healthy fleet fires none of them
    groups = prom.api("rules")["groups"]
    assert sum(len(g["rules"]) for g in groups) == 27
    firing = [a for a in prom.api("alerts")["alerts"] if a["state"] == "firing"]
    assert firing == [], firing
    print(f"{len(queries)} panel queries answered in {time.monotonic() - started:.1f} s")


def test_a_query_naming_a_missing_metric_returns_no_series(prom: Prometheus) -> None:
    """The check above can fail: a series the nodes do not export answers nothing."""
    wait_for("a scrape", lambda: prom.series("crewlet_fleet_view_readable"), timeout=30, every=0.5)
    assert prom.series("max by (node) (crewlet_no_such_metric_total)") == []
    assert prom.series('crewlet_alarm_active{kind="no_such_alarm"}') == []
