"""Issue 5's bad input, on a fleet of its own: each is refused or reported by its named event.

- a broker nobody answers at boot: the node gives up after its connect budget (FL-28: 30 s on a
  single server) and exits 1 with ``node_boot_failed`` naming the URL;
- a fleet whose nodes leave a role unmanned (one node with ``[data, ingress, seats]``): every
  sweep checks the assembled fleet, ``fleet_role_unmanned role=workers`` is logged (FL-20) and
  ``/fleet`` says so, while the node keeps serving;
- a seat whose placement no node matches (pinned to ``nowhere``): ``seats_unplaceable`` names it
  (FL-61), ``/fleet`` and ``crewlet fleet status`` list it, its mail waits in its inbox, and every
  other seat is served.

The node id shared by two processes and the broker lost for longer than the TTL run against the
3-node fleet in ``test_fleet.py``. The unreachable-broker node is started with the module so its
30 s budget runs while the other tests do.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.fleet.harness import TTL, company_doc, wait_for
from tests.fleet.llm import FleetLLM
from tests.support.history import History
from tests.support.procs import TOKEN, VENV_BIN, NatsServer, Node, free_port, node_file, write_yaml

pytestmark = pytest.mark.fleet

H = {"Authorization": f"Bearer {TOKEN}"}


@dataclass
class Solo:
    """One node on its own nats-server, and a node whose broker never answers."""

    server: NatsServer
    llm: FleetLLM
    node: Node
    unreachable: Node
    dead_url: str
    started: float  # monotonic time the unreachable node was started


@pytest.fixture(scope="module")
def solo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Solo]:
    root = tmp_path_factory.mktemp("solo")
    dead_url = f"nats://127.0.0.1:{free_port()}"
    procs: list[Node] = []
    server = NatsServer(root / "nats")
    llm = FleetLLM()
    try:
        port = free_port()
        lost = Node(
            [
                "node",
                "--node",
                str(
                    node_file(
                        root / "lost", node_id="lost", port=port, stream={"type": "nats", "url": dead_url}
                    )
                ),
            ],
            dir=root / "lost" / "run1",
            port=port,
        )
        procs.append(lost)
        started = time.monotonic()
        pinned = {"name": "Vault keeper", "handle": "vault", "placement": {"node": "nowhere"}}
        company = write_yaml(root / "company.yaml", company_doc(llm, extra_roles=[pinned]))
        port = free_port()
        path = node_file(
            root / "solo",
            node_id="solo",
            port=port,
            node={"id": "solo", "roles": ["data", "ingress", "seats"]},
            stream={"type": "nats", "url": server.url, "ack_wait_seconds": 5.0},
            coordination={"type": "embedded-kv", "lease_ttl_seconds": TTL},
            logging={"level": "debug", "format": "json"},
        )
        node = Node(
            ["node", "--node", str(path), "--company", str(company)], dir=root / "solo" / "run1", port=port
        )
        procs.append(node)
        node.wait_ready(60)
        yield Solo(server, llm, node, lost, dead_url, started)
    finally:
        for p in procs:
            p.stop(grace=10)
        llm.stop()
        server.stop()


def _events(node: Node, name: str) -> list[dict[str, object]]:
    return [e for e in node.events() if e.get("event") == name]


def _fleet(node: Node) -> dict[str, object]:
    r = httpx.get(f"{node.url}/fleet", headers=H, timeout=10)
    assert r.status_code == 200, r.text
    return dict(r.json())


def test_a_role_no_node_runs_is_reported_and_the_node_keeps_serving(solo: Solo) -> None:
    unmanned = wait_for(
        "fleet_role_unmanned", lambda: _events(solo.node, "fleet_role_unmanned"), timeout=3 * 5.0
    )
    assert [e["role"] for e in unmanned] == ["workers"]
    assert "nothing fires on schedule" in str(unmanned[0]["lost"])
    assert _fleet(solo.node)["unmanned_roles"] == ["workers"]
    r = httpx.post(
        f"{solo.node.url}/seats/dev/messages", json={"text": "still serving?"}, headers=H, timeout=10
    )
    assert r.status_code == 202, r.text
    message = r.json()["message_id"]

    def answered() -> bool:
        got = httpx.get(f"{solo.node.url}/messages/{message}", headers=H, timeout=10).json()
        return bool(got["status"] == "answered")

    wait_for("the message answered", answered, timeout=30)
    History.from_logs({"solo#1": solo.node.log_path}).assert_sound(accepted={r.json()["event_id"]: "dev"})


def test_a_placement_no_node_matches_is_reported_and_its_mail_waits(solo: Solo) -> None:
    reported = wait_for("seats_unplaceable", lambda: _events(solo.node, "seats_unplaceable"), timeout=15)
    assert reported[0]["seats"] == ["vault"] and reported[0]["selectors"] == ["node=nowhere"]
    # every other seat is claimed (four per sweep, FL-56); the pinned one never is
    view = wait_for(
        "the placeable seats owned",
        lambda: (lambda v: v if v["unowned_seats"] == ["vault"] else None)(_fleet(solo.node)),
        timeout=30,
    )
    assert view["unplaceable_seats"] == [{"seat": "vault", "selector": "node=nowhere"}]
    owned = {s["seat"] for s in view["seats"]}  # type: ignore[attr-defined]
    assert len(owned) == 9 and "vault" not in owned
    r = httpx.post(
        f"{solo.node.url}/seats/vault/messages", json={"text": "for the vault"}, headers=H, timeout=10
    )
    assert r.status_code == 202, r.text
    waiting = str(r.json()["event_id"])
    out = subprocess.run(
        [str(VENV_BIN / "crewlet"), "fleet", "status", "--url", solo.node.url],
        env={**os.environ, "CREWLET_API_TOKEN": TOKEN},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "unplaceable seats: vault (node=nowhere)" in out.stdout
    assert "unmanned roles: workers" in out.stdout
    status = httpx.get(f"{solo.node.url}/messages/{r.json()['message_id']}", headers=H, timeout=10).json()
    assert status["status"] == "queued"
    History.from_logs({"solo#1": solo.node.log_path}).assert_sound(
        accepted={waiting: "vault"}, pending=[waiting]
    )


def test_an_unreachable_broker_at_boot_is_refused_by_name(solo: Solo) -> None:
    node = solo.unreachable
    deadline = solo.started + 30.0 + 15.0  # the connect budget of a single server (FL-28), and slack
    while node.popen.poll() is None and time.monotonic() < deadline:
        try:
            r = httpx.get(f"{node.url}/ready", timeout=5)
            assert r.status_code == 503, r.text  # the listener is up; the node is not ready
        except httpx.TransportError:
            pass  # not listening yet, or exiting
        time.sleep(0.5)
    assert node.wait(5) == 1, node.output()[-3000:]
    failed = _events(node, "node_boot_failed")
    assert len(failed) == 1 and failed[0]["error_type"] == "BrokerUnreachable", failed
    assert solo.dead_url in str(failed[0]["error"]) and "no NATS server answered" in str(failed[0]["error"])
    assert not _events(node, "node_ready")
