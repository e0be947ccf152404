"""A node process: boots on the embedded broker or an external nats-server, answers its probes,
lists itself in the fleet view, drains on SIGTERM, and leaves no broker behind when killed (issue 2)."""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.procs import TOKEN, VENV_BIN, NatsServer, Node, children_named, node_file, pid_alive


def test_crewlet_run_boots_on_the_embedded_broker(start_node: Callable[..., Node], tmp_path: Path) -> None:
    node = start_node("run", "--data-dir", str(tmp_path / "data"), name="run")
    ready = node.wait_ready()
    assert ready == {
        "ready": True,
        "node": "node-0",
        "configured": True,
        "draining": False,
        "posture": "serve",
    }
    health = node.get("/health", token=None).json()
    assert health["status"] == "ok"
    assert health["roles"] == ["data", "ingress", "seats", "workers"]
    assert health["broker"] == "member" and health["configured"] is True
    assert health["in_flight"] == 0 and health["shutting_down"] is False and health["posture"] == "serve"
    assert "held" in health["seats"]
    # the child broker listens on loopback only
    brokers = children_named(node.pid, "nats-server")
    assert len(brokers) == 1
    conf = (tmp_path / "data" / "node-0" / "broker" / "nats-server.conf").read_text()
    assert '"listen": "127.0.0.1:-1"' in conf
    # the fleet view lists this node from its presence lease
    fleet = node.get("/fleet").json()
    assert [n["id"] for n in fleet["nodes"]] == ["node-0"]
    assert fleet["nodes"][0]["roles"] == ["data", "ingress", "seats", "workers"]
    assert fleet["unmanned_roles"] == []


def test_probes_are_open_and_the_api_is_guarded(start_node: Callable[..., Node], tmp_path: Path) -> None:
    node = start_node("run", "--data-dir", str(tmp_path / "d"))
    node.wait_ready()
    assert node.get("/health/", token=None).status_code == 200
    r = node.get("/fleet", token=None)
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    r = node.get("/fleet", token="wrong-token-wrong-token-wrong")
    assert r.status_code == 401
    assert node.get("/fleet").status_code == 200


def test_sigterm_drains_and_exits_zero(start_node: Callable[..., Node], tmp_path: Path) -> None:
    node = start_node("run", "--data-dir", str(tmp_path / "d"))
    node.wait_ready()
    broker = children_named(node.pid, "nats-server")[0]
    node.signal(signal.SIGTERM)
    assert node.wait(20) == 0
    events = [e["event"] for e in node.events()]
    assert events.index("drain_requested") < events.index("node_stopped")
    deadline = time.monotonic() + 5
    while pid_alive(broker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(broker), "the embedded nats-server outlived a drained node"


def test_kill_9_leaves_no_orphan_broker(start_node: Callable[..., Node], tmp_path: Path) -> None:
    node = start_node("run", "--data-dir", str(tmp_path / "d"))
    node.wait_ready()
    brokers = children_named(node.pid, "nats-server")
    assert len(brokers) == 1
    node.signal(signal.SIGKILL)
    node.wait(5)
    deadline = time.monotonic() + 5
    while pid_alive(brokers[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(brokers[0]), "kill -9 of the node left its nats-server running"


def test_external_nats_works_the_same(
    nats_server: NatsServer, start_node: Callable[..., Node], tmp_path: Path, example_company: Path
) -> None:
    # nats_server first: fixtures tear down in reverse, so the node drains while its broker is up
    from tests.support.procs import free_port

    port = free_port()
    path = node_file(
        tmp_path / "ext", node_id="ext-1", port=port, stream={"type": "nats", "url": nats_server.url}
    )
    node = start_node("node", "--node", str(path), "--company", str(example_company), name="ext", port=port)
    node.wait_ready()
    assert node.get("/health", token=None).json()["broker"] == "client"
    assert children_named(node.pid, "nats-server") == []
    fleet = node.get("/fleet").json()
    assert fleet["nodes"][0]["id"] == "ext-1" and fleet["nodes"][0]["broker"] == "client"
    # crewlet fleet status (make fleet-status) lists the running node
    out = subprocess.run(
        [str(VENV_BIN / "crewlet"), "fleet", "status", "--url", node.url],
        env={"CREWLET_API_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ext-1" in out.stdout and "data,ingress,seats,workers" in out.stdout and "client" in out.stdout


def test_server_with_1mib_max_payload_is_refused_by_name(
    start_node: Callable[..., Node], tmp_path: Path, example_company: Path
) -> None:
    small = NatsServer(tmp_path / "small-nats", max_payload="1MB")
    try:
        from tests.support.procs import free_port

        port = free_port()
        path = node_file(tmp_path / "n", node_id="n1", port=port, stream={"type": "nats", "url": small.url})
        node = start_node("node", "--node", str(path), "--company", str(example_company), name="n", port=port)
        code = node.wait(30)
        assert code == 2, f"exit {code}: {node.output()[-3000:]}"
        failed = [e for e in node.events() if e.get("event") == "node_boot_failed"]
        assert failed and "max_payload" in failed[0]["error"] and "8 MB" in failed[0]["error"]
    finally:
        small.stop()


def test_fleet_status_exits_nonzero_when_the_node_is_unreachable() -> None:
    from tests.support.procs import free_port

    out = subprocess.run(
        [str(VENV_BIN / "crewlet"), "fleet", "status", "--url", f"http://127.0.0.1:{free_port()}"],
        env={"CREWLET_API_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 1 and "cannot reach" in out.stdout
