"""An embedded fleet for tests: crewlet members whose child nats-servers cluster, plus leaf satellites.

No external nats-server runs here: each member node spawns its own child broker (FL-4) with
``stream.cluster`` (routes to the other members) and a leaf listener (``stream.leaf.port``); a
satellite (``roles: [seats]``, ``store.scratch: true``) spawns a leaf whose remotes are every
member's leaf port (FL-144). Ports are fixed per node for the fleet's life, so a restarted node
keeps its routes. Members boot at the same time, as an orchestrator starts them (the cluster forms
only once a quorum is up).

Every process is stopped by PID in :meth:`EmbeddedFleet.stop` (fixtures call it in a finalizer);
a node's child nats-server dies with it (``PR_SET_PDEATHSIG``), and :meth:`stop` also kills any
child broker left behind by PID.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.fleet.harness import SECRET, company_doc, wait_for
from tests.fleet.llm import FleetLLM
from tests.support.procs import TOKEN, Node, children_named, free_port, node_file, pid_alive, write_yaml

__all__ = ["CLUSTER", "EmbeddedFleet"]

CLUSTER = "crewlet-test"
"""The embedded cluster's name (``stream.cluster.name``)."""
TTL = 3.0
"""The test lease TTL in seconds."""
H = {"Authorization": f"Bearer {TOKEN}"}


class EmbeddedFleet:
    """Embedded members and leaf satellites of one test module.

    Args:
        root: Directory for everything (node stores, logs, the company file).
        members: Member node ids (three: FL-22 refuses two).
        satellites: Satellite node ids (leaves of every member).
        extra_roles: Extra roles for the company's support unit (e.g. a seat pinned to a satellite).
    """

    def __init__(
        self,
        root: Path,
        members: tuple[str, ...] = ("a", "b", "c"),
        satellites: tuple[str, ...] = ("s",),
        extra_roles: list[dict[str, Any]] | None = None,
    ) -> None:
        self.root = root
        self.members = members
        self.satellites = satellites
        self.llm = FleetLLM()
        self.company = write_yaml(root / "company.yaml", company_doc(self.llm, extra_roles=extra_roles))
        self.route_ports = {m: free_port() for m in members}
        self.leaf_ports = {m: free_port() for m in members}
        self.api_ports = {n: free_port() for n in (*members, *satellites)}
        self.nodes: dict[str, Node] = {}
        self.procs: list[Node] = []
        self.files: dict[str, Path] = {}
        for m in members:
            self.files[m] = self.member_file(m)
        for s in satellites:
            self.files[s] = self.satellite_file(s)

    # -- node files --------------------------------------------------------------------------

    def member_file(self, name: str, *, peers: tuple[str, ...] | None = None) -> Path:
        """Write member ``name``'s node file: all four roles, clustered, with a leaf listener."""
        others = [m for m in (peers if peers is not None else self.members) if m != name]
        if name not in self.route_ports:
            self.route_ports[name] = free_port()
            self.leaf_ports[name] = free_port()
            self.api_ports[name] = free_port()
        return node_file(
            self.root / name,
            node_id=name,
            port=self.api_ports[name],
            stream={
                "type": "embedded",
                "replicas": 3,
                "ack_wait_seconds": 5,
                "cluster": {
                    "name": CLUSTER,
                    "host": "127.0.0.1",
                    "port": self.route_ports[name],
                    "peers": [f"nats://127.0.0.1:{self.route_ports[o]}" for o in others],
                },
                "leaf": {"port": self.leaf_ports[name]},
            },
            coordination={"type": "embedded-kv", "lease_ttl_seconds": TTL},
            logging={"level": "debug", "format": "json"},
        )

    def satellite_file(self, name: str, *, roles: tuple[str, ...] = ("seats",), **extra: Any) -> Path:
        """Write satellite ``name``'s node file: a leaf of every member, scratch store (FL-144)."""
        if name not in self.api_ports:
            self.api_ports[name] = free_port()
        return node_file(
            self.root / name,
            node_id=name,
            port=self.api_ports[name],
            node={"id": name, "roles": list(roles), **extra.pop("node", {})},
            store={"dir": str(self.root / name / "store"), "scratch": True},
            stream={
                "type": "embedded",
                "replicas": 3,
                "ack_wait_seconds": 5,
                "leaf": {"urls": [f"nats-leaf://127.0.0.1:{p}" for p in self.leaf_ports.values()]},
            },
            coordination={"type": "embedded-kv", "lease_ttl_seconds": TTL},
            logging={"level": "debug", "format": "json"},
            **extra,
        )

    # -- processes ---------------------------------------------------------------------------

    def start(self, name: str, *, file: Path | None = None) -> Node:
        """Start (or restart) node ``name`` as a new process with its own log."""
        path = file or self.files[name]
        self.files[name] = path
        runs = sum(1 for p in self.procs if p.log_path.parent.parent.name == name)
        node = Node(
            ["node", "--node", str(path), "--company", str(self.company)],
            dir=self.root / name / f"run{runs + 1}",
            port=int(yaml.safe_load(path.read_text())["api"]["port"]),
            env={"GITHUB_WEBHOOK_SECRET": SECRET},
        )
        self.procs.append(node)
        self.nodes[name] = node
        return node

    def start_all(self, names: tuple[str, ...] | None = None, *, timeout: float = 90.0) -> None:
        """Start ``names`` (default: every member and satellite) at once, then wait for each to be ready."""
        names = names or (*self.members, *self.satellites)
        started = [self.start(n) for n in names]
        for node in started:
            node.wait_ready(timeout=timeout)

    def brokers(self, name: str) -> list[int]:
        """PIDs of node ``name``'s child nats-server(s)."""
        node = self.nodes[name]
        return children_named(node.popen.pid, "nats-server") if node.popen.poll() is None else []

    def kill(self, name: str) -> None:
        """kill -9 node ``name`` and its child broker (a member lost for good, or a crash)."""
        node = self.nodes[name]
        pids = self.brokers(name)
        node.signal(signal.SIGKILL)
        node.wait(10)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                if pid_alive(pid):
                    os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        """Stop every process by PID (SIGTERM to all at once, then each waited for), then the model."""
        for node in self.procs:
            if node.popen.poll() is None:
                node.signal(signal.SIGCONT)
                node.signal(signal.SIGTERM)
        for node in self.procs:
            pids = children_named(node.popen.pid, "nats-server") if node.popen.poll() is None else []
            node.stop(grace=15)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    if pid_alive(pid):
                        os.kill(pid, signal.SIGKILL)
        self.llm.stop()

    # -- asking nodes ------------------------------------------------------------------------

    def api(self, name: str) -> httpx.Client:
        """An authenticated API client on node ``name``."""
        return httpx.Client(base_url=self.nodes[name].url, headers=H, timeout=15.0)

    def view(self, name: str) -> dict[str, Any]:
        """``GET /fleet`` on node ``name``."""
        with self.api(name) as c:
            r = c.get("/fleet")
            assert r.status_code == 200, r.text
            return dict(r.json())

    def owners(self, via: str) -> dict[str, str]:
        """Seat → node, as the lease bucket says (``GET /fleet`` on ``via``)."""
        try:
            return {s["seat"]: s["node"] for s in self.view(via)["seats"]}
        except (httpx.HTTPError, AssertionError):
            return {}

    def wait_owner(self, seat: str, node: str, *, via: str, timeout: float = 60.0) -> None:
        """Wait until ``seat`` is held by ``node`` according to ``via``."""
        wait_for(f"{seat} held by {node}", lambda: self.owners(via).get(seat) == node, timeout=timeout)

    def held(self, name: str) -> list[str]:
        """The seats node ``name``'s ``/health`` says it holds."""
        try:
            return list(self.nodes[name].get("/health", token=None).json()["seats"]["held"])
        except (httpx.HTTPError, ValueError, KeyError):
            return []

    def events(self, name: str, event: str) -> list[dict[str, Any]]:
        """Log lines named ``event`` in every incarnation of node ``name``."""
        out: list[dict[str, Any]] = []
        for p in self.procs:
            if p.log_path.parent.parent.name == name:
                out += [e for e in p.events() if e.get("event") == event]
        return out


def wait_until(what: str, probe: Any, *, timeout: float) -> Any:
    """:func:`tests.fleet.harness.wait_for` re-exported for embedded-fleet tests."""
    return wait_for(what, probe, timeout=timeout)


def now() -> float:
    """Monotonic seconds (for tests measuring a wait in their messages, never asserting on it)."""
    return time.monotonic()
