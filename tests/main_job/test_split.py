"""The compose ``split`` profile's shape runs the main job: ``[data, ingress]`` + ``[data, seats, workers]``.

Two node processes share one nats-server (``stream.type: nats``), booted at the same time as an
orchestrator starts them. GitHub's real ``issues.opened`` delivery is posted to the ingress node;
the triage turn and the lead's turn run on the seats node (the only one with ``seats``), and what
they leave in the tracker is read back through the ingress node: one work item, filed by triage,
assigned to the lead, moved to ``in_progress`` with the lead's comment. The seats node serves the
probes and ``/metrics`` only (FL-16; ``/metrics`` on every node is issue 15's choice).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tests.support.procs import REPO, Node, free_port, node_file

from .support import SECRET, post_github, wait_for


def test_split_nodes_run_the_main_job_together(
    nats_server: Any, start_node: Callable[..., Node], tmp_path: Path
) -> None:
    # nats_server first: fixtures tear down in reverse, so the nodes drain while their broker is up
    company = str(REPO / "examples" / "company.yaml")
    stream = {"type": "nats", "url": nats_server.url, "replicas": 1}
    files = {
        name: (
            node_file(
                tmp_path / name, node_id=name, port=port, node={"id": name, "roles": roles}, stream=stream
            ),
            port,
        )
        for name, roles, port in (
            ("front", ["data", "ingress"], free_port()),
            ("back", ["data", "seats", "workers"], free_port()),
        )
    }
    env = {"GITHUB_WEBHOOK_SECRET": SECRET}
    nodes = {
        name: start_node("node", "--node", str(f), "--company", company, name=name, port=port, env=env)
        for name, (f, port) in files.items()
    }
    for n in nodes.values():  # both started before either is waited for
        n.wait_ready(90)
    front, back = nodes["front"], nodes["back"]
    assert back.get("/work").status_code == 404  # no ingress: probes only (FL-16)
    assert back.get("/agents").status_code == 404
    assert httpx.post(back.url + "/config", json={}, timeout=5).status_code == 401  # a write: guarded
    assert back.get("/ready", token=None).status_code == 200
    assert [e for e in back.events() if e.get("event") == "api_probes_listening"]

    r = post_github(front)
    assert r.status_code == 202, r.text
    assert r.json()["seat"] == "triage"

    def moved_on() -> dict[str, Any] | None:
        got = front.get("/work/SUP-1")
        if got.status_code != 200:
            return None
        item: dict[str, Any] = got.json()
        return item if item["status"] == "in_progress" and item["comments"] else None

    item = wait_for("SUP-1 moved on by the lead", moved_on, timeout=60, node=back)
    assert item["reporter"] == "seat:triage" and item["assignee"] == "lead"
    assert [c["author"] for c in item["comments"]] == ["seat:lead"]
    # both data nodes hold the same tracker rows (the estate is whole on each, ES-1)
    assert front.get("/work?project=SUP").json()["count"] == 1
    fleet = front.get("/fleet").json()
    roles = {n["id"]: sorted(n["roles"]) for n in fleet["nodes"]}
    assert roles == {"front": ["data", "ingress"], "back": ["data", "seats", "workers"]}
    assert {s["node"] for s in fleet["seats"]} == {"back"}
    # the turns ran on the node without ingress: its /metrics (served beside the probes, no token)
    # is where Prometheus finds them (issue 15)
    text = httpx.get(back.url + "/metrics", timeout=10).text
    assert 'crewlet_turns_total{outcome="delivered",seat="triage"} 1.0' in text, text[:2000]
    assert "crewlet_node_info{broker_kind=" in text and 'node="back"' in text
