"""The fleet test harness: a 3-member nats-server cluster, N node processes, faults, and the history.

:class:`Fleet` starts a real 3-member cluster (:class:`tests.support.cluster.NatsCluster`), one
:class:`~tests.fleet.proxy.NatsProxy` per node in front of it (each preferring another member), a
scripted model (:class:`~tests.fleet.llm.FleetLLM`), and crewlet node processes on loopback with a
short test TTL: ``stream: {type: nats, url: <the node's proxy>, replicas: 3, ack_wait_seconds: 5}``,
``coordination: {type: embedded-kv, lease_ttl_seconds: 3}``, ``logging: {level: debug}``. Nodes are
members (every role) or, when asked for, satellites (FL-144: ``roles: [seats]``, a scratch store, a
plain client of the same cluster through their own proxy; no data, no ingress). The company
is the example company grown to nine agent seats, every seat on the scripted model (the example's
offline provider is kept beside it with its script path made absolute), with the GitHub webhook
secret set in every node's environment.

Every process is stopped by PID in :meth:`Fleet.stop` (fixtures call it in a finalizer). A node
restarted under the same id is a new process with its own log (``a#2``), so the history covers
every incarnation; :meth:`Fleet.history` reads them all.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import math
import signal
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import nats
import yaml

from tests.fleet.llm import FleetLLM
from tests.fleet.proxy import NatsProxy
from tests.support.cluster import NatsCluster
from tests.support.history import History
from tests.support.procs import REPO, SHARED, TOKEN, Node, free_port, node_file, write_yaml

__all__ = ["SEATS", "SECRET", "TTL", "Fleet", "company_doc", "wait_for"]

TTL = 3.0
"""The test lease TTL in seconds (heartbeat 1 s)."""
ACK_WAIT = 5.0
"""The test mailbox ack window in seconds (FL-83: a killed holder's batch returns after it)."""
SWEEP = 5.0
"""The placement sweep interval in seconds (FL-56)."""
SECRET = "fleet-gh-secret-41c2"
"""``GITHUB_WEBHOOK_SECRET`` of every node."""
SEATS = ("lead", "dev", "docs", "qa", "sre", "ops", "triage", "pm", "design")
"""The nine agent seats of the test company, in org order."""
GITHUB_ISSUE = SHARED / "data" / "github-webhooks" / "issues.opened.json"

T = TypeVar("T")
H = {"Authorization": f"Bearer {TOKEN}"}


def wait_for(what: str, probe: Callable[[], T | None], *, timeout: float, every: float = 0.1) -> T:
    """Poll ``probe`` until it returns something truthy, and return that.

    Raises:
        AssertionError: ``timeout`` seconds passed (naming ``what`` and the last value).
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


def company_doc(llm: FleetLLM, *, extra_roles: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The example company with nine agent seats (:data:`SEATS`), all on ``llm``.

    Args:
        llm: The scripted model every seat uses (``providers.llm.default``).
        extra_roles: More roles for the support unit (e.g. a pinned seat).
    """
    data = yaml.safe_load((REPO / "examples" / "company.yaml").read_text())
    offline = dict(data["providers"]["llm"]["default"])
    offline["script"] = str((REPO / "examples" / "offline-script.yaml").resolve())
    data["providers"]["llm"] = {"default": llm.entry(), "offline": offline}
    units = {u["id"]: u for u in data["units"]}
    for handle in ("qa", "sre", "ops"):
        units["eng"]["roles"].append(
            {"name": f"Engineer {handle}", "handle": handle, "goal": "Keep lantern working"}
        )
    for handle in ("pm", "design"):
        units["support"]["roles"].append(
            {"name": f"Support {handle}", "handle": handle, "goal": "Help users"}
        )
    units["support"]["roles"] += extra_roles or []
    return dict(data)


def sign(body: bytes) -> str:
    """GitHub's ``X-Hub-Signature-256`` of ``body`` under :data:`SECRET`."""
    return "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()


class Fleet:
    """A cluster, the scripted model, and the node processes of one test module.

    Args:
        root: Directory for everything (cluster stores, node stores, logs).
        names: The ids of the nodes with every role (data, ingress, seats, workers).
        satellites: The ids of seats-only nodes on a scratch store (FL-144; default none). They are
            in :attr:`nodes`, :attr:`proxies`, :meth:`live` and :meth:`held` like any node, but
            :attr:`names` stays the nodes with data and ingress, and :meth:`api` never picks one.

    Raises:
        Exception: whatever starting the cluster or writing a node file raised (every process
            started so far is stopped first).
    """

    def __init__(
        self, root: Path, names: tuple[str, ...] = ("a", "b", "c"), satellites: tuple[str, ...] = ()
    ) -> None:
        self.root = root
        self.names = names
        self.satellites = satellites
        self.llm = FleetLLM()
        self.cluster: NatsCluster | None = None
        self.proxies: dict[str, NatsProxy] = {}
        self.nodes: dict[str, Node] = {}
        self.procs: dict[str, Node] = {}  # label → process, every incarnation
        self.files: dict[str, Path] = {}
        self.accepted: dict[str, str] = {}  # event id → seat, every trigger an ingress accepted
        self.message_ids: dict[str, str] = {}  # event id → message id, for API messages
        self.paused: set[str] = set()
        self.env: dict[str, dict[str, str]] = {}  # node → extra environment for its next start
        self.seats: tuple[str, ...] = SEATS  # the agent seats of the active revision
        self.company = write_yaml(root / "company.yaml", company_doc(self.llm))
        try:
            self.cluster = NatsCluster(root / "cluster")  # retries a port taken meanwhile (P1)
            members = [("127.0.0.1", m.client_port) for m in self.cluster.members]
            for i, name in enumerate((*names, *satellites)):
                # each node prefers another member first, so the cluster's load and faults spread
                k = i % len(members)
                self.proxies[name] = NatsProxy(members[k:] + members[:k])
                port = free_port()
                seats_only = name in satellites  # FL-144: no estate copy, a store wiped at every boot
                self.files[name] = node_file(
                    root / name,
                    node_id=name,
                    port=port,
                    node={"roles": ["seats"]} if seats_only else {},
                    store={"scratch": True} if seats_only else {},
                    stream={
                        "type": "nats",
                        "url": self.proxies[name].url,
                        "replicas": 3,
                        "ack_wait_seconds": ACK_WAIT,
                    },
                    coordination={"type": "embedded-kv", "lease_ttl_seconds": TTL},
                    logging={"level": "debug", "format": "json"},
                )
        except BaseException:
            self.stop()
            raise

    # -- processes ---------------------------------------------------------------------------

    def start(self, name: str, *, node_file: Path | None = None, args: tuple[str, ...] = ()) -> Node:
        """Start (or restart) node ``name`` as a new incarnation with its own log."""
        path = node_file or self.files[name]
        port = int(yaml.safe_load(path.read_text())["api"]["port"])
        runs = sum(1 for label in self.procs if label.split("#")[0] == name)
        label = f"{name}#{runs + 1}"
        node = Node(
            ["node", "--node", str(path), "--company", str(self.company), *args],
            dir=self.root / name / f"run{runs + 1}",
            port=port,
            env={"GITHUB_WEBHOOK_SECRET": SECRET, **self.env.get(name, {})},
        )
        self.procs[label] = node
        if name in self.files:
            self.nodes[name] = node
        return node

    def boot(self, names: tuple[str, ...] | None = None, *, timeout: float = 90.0) -> list[str]:
        """Start ``names`` (None: every node, satellites included) at the same time, as an
        orchestrator does, and wait until each answers ``/ready``.

        A node that exits before it is ready is started once more, as an orchestrator's restart
        policy would (compose ``restart: unless-stopped``); on a fresh cluster a node booting beside
        its peers has been seen to meet a bucket still electing its leader.

        Returns:
            The names that needed that second start (empty in the usual case).

        Raises:
            AssertionError: a node was not ready within ``timeout`` seconds, or exited twice.
        """
        names = names or (*self.names, *self.satellites)
        for name in names:
            self.start(name)
        restarted = []
        for name in names:
            try:
                self.nodes[name].wait_ready(timeout)
            except AssertionError:
                if self.nodes[name].popen.poll() is None:
                    raise
                restarted.append(name)
                self.start(name).wait_ready(timeout)
        return restarted

    def live(self) -> dict[str, Node]:
        """The fleet nodes whose current process is running and not stopped by :meth:`pause`."""
        return {
            n: node for n, node in self.nodes.items() if node.popen.poll() is None and n not in self.paused
        }

    def pause(self, name: str) -> None:
        """SIGSTOP node ``name`` (a wedged process: alive, silent); the helpers stop asking it."""
        self.paused.add(name)
        self.nodes[name].signal(signal.SIGSTOP)

    def resume(self, name: str) -> None:
        """SIGCONT node ``name``."""
        self.nodes[name].signal(signal.SIGCONT)
        self.paused.discard(name)

    def stop(self) -> None:
        """Stop every process by PID, then the proxies, the cluster and the model."""
        for node in self.procs.values():  # every drain at once, then each waited for by PID
            if node.popen.poll() is None:
                node.signal(signal.SIGCONT)
                node.signal(signal.SIGTERM)
        for node in self.procs.values():
            node.stop(grace=10)
        for proxy in self.proxies.values():
            proxy.stop()
        if self.cluster is not None:
            self.cluster.stop()
        self.llm.stop()

    # -- what the fleet says -----------------------------------------------------------------

    def api(self, name: str | None = None) -> httpx.Client:
        """An API client on node ``name`` (default: the first live one with ingress, not a satellite).

        Raises:
            StopIteration: no name was given and no node with ingress is live.
        """
        live = self.live()
        node = self.nodes[name] if name is not None else next(n for k, n in live.items() if k in self.names)
        return httpx.Client(base_url=node.url, headers=H, timeout=10.0)

    def view(self, name: str | None = None) -> dict[str, Any]:
        """``GET /fleet`` on node ``name`` (default: the first live one with ingress)."""
        with self.api(name) as c:
            r = c.get("/fleet")
            assert r.status_code == 200, r.text
            return dict(r.json())

    def held(self) -> dict[str, list[str]]:
        """Node → the seats its ``/health`` says it holds, for every live node."""
        out = {}
        for name, node in self.live().items():
            try:
                out[name] = list(node.get("/health", token=None).json()["seats"]["held"])
            except (httpx.HTTPError, ValueError, KeyError):
                out[name] = []
        return out

    def owners(self) -> dict[str, str]:
        """Seat → node, as the lease bucket says (``GET /fleet``)."""
        try:
            return {s["seat"]: s["node"] for s in self.view()["seats"]}
        except (httpx.HTTPError, AssertionError, StopIteration):
            return {}

    def converged(self, nodes: tuple[str, ...] | None = None, seats: tuple[str, ...] | None = None) -> str:
        """ "" when every seat is owned exactly once by the given live nodes, within each one's share.

        Exactly once on both sides: the lease bucket names one owner per seat, and the seats the
        nodes say they hold (``/health``) are disjoint, cover every seat and agree with the bucket.
        No node holds more than ``ceil(seats / nodes)`` (FL-56).

        Returns:
            "" when converged, else what is not yet true (for :func:`wait_for` messages).
        """
        names = nodes or tuple(self.live())
        seats = seats if seats is not None else self.seats
        held = self.held()
        owners = self.owners()
        share = math.ceil(len(seats) / len(names))
        claimed = [s for n in names for s in held.get(n, [])]
        if sorted(claimed) != sorted(seats):
            return f"held {held}"
        if any(owners.get(s) != n for n in names for s in held[n]):
            return f"bucket {owners} disagrees with held {held}"
        if any(len(held[n]) > share for n in names):
            return f"over the share {share}: {held}"
        return ""

    def wait_converged(
        self,
        timeout: float = 60.0,
        nodes: tuple[str, ...] | None = None,
        seats: tuple[str, ...] | None = None,
    ) -> float:
        """Wait until :meth:`converged`; return the seconds it took."""
        t0 = time.monotonic()
        last = "never asked"
        deadline = t0 + timeout
        while time.monotonic() < deadline:
            last = self.converged(nodes, seats)
            if not last:
                return time.monotonic() - t0
            time.sleep(0.1)
        raise AssertionError(f"the fleet did not converge in {timeout} s: {last}")

    def history(self) -> History:
        """Every incarnation's log so far, as one history."""
        return History.from_logs({label: node.log_path for label, node in self.procs.items()})

    def check_history(self, *, pending: tuple[str, ...] = ()) -> History:
        """Check the history against every trigger accepted so far; return it."""
        h = self.history()
        h.assert_sound(accepted=self.accepted, pending=pending)
        return h

    def events(self, name: str, event: str) -> list[dict[str, Any]]:
        """Lines named ``event`` in every incarnation of node ``name``."""
        out = []
        for label, node in self.procs.items():
            if label.split("#")[0] == name:
                out += [e for e in node.events() if e.get("event") == event]
        return out

    def stream_leader(self, stream: str) -> str:
        """The cluster member leading ``stream`` (e.g. ``KV_crewlet_leases``), asked of the cluster."""
        assert self.cluster is not None
        urls = [m.url for m in self.cluster.members if m.running]

        async def ask() -> str:
            nc = await nats.connect(servers=urls, connect_timeout=2, max_reconnect_attempts=0)
            try:
                info = await nc.jetstream(timeout=5.0).stream_info(stream)
                return str(info.cluster.leader if info.cluster is not None else "")
            finally:
                await nc.close()

        return asyncio.run(ask())

    # -- triggers ----------------------------------------------------------------------------

    def post_message(self, seat: str, text: str, *, via: str | None = None) -> str:
        """``POST /seats/<seat>/messages`` through node ``via``; return the accepted event id."""
        with self.api(via) as c:
            r = c.post(f"/seats/{seat}/messages", json={"text": text})
        assert r.status_code == 202, r.text
        event_id = str(r.json()["event_id"])
        self.accepted[event_id] = seat
        self.message_ids[event_id] = str(r.json()["message_id"])
        return event_id

    def post_github(self, via: str, delivery: str) -> httpx.Response:
        """POST GitHub's real ``issues.opened`` delivery, signed, with ``X-GitHub-Delivery``."""
        body = GITHUB_ISSUE.read_bytes()
        headers = {
            "Content-Type": "application/json",
            "X-GitHub-Event": "issues",
            "X-GitHub-Delivery": delivery,
            "X-Hub-Signature-256": sign(body),
        }
        r = httpx.post(
            f"{self.nodes[via].url}/webhooks/inbound/github", content=body, headers=headers, timeout=30
        )
        if r.status_code == 202:
            self.accepted[str(r.json()["event_id"])] = str(r.json()["seat"])
        return r

    def commits(self, event_id: str) -> list[tuple[str, dict[str, Any]]]:
        """``(process label, line)`` of every ``seat_turn_committed`` naming ``event_id``."""
        out = []
        for label, node in self.procs.items():
            for e in node.events():
                if e.get("event") == "seat_turn_committed" and event_id in (e.get("event_ids") or []):
                    out.append((label, e))
        return out

    def wait_handled(self, *event_ids: str, timeout: float = 30.0) -> None:
        """Wait until each event is committed by some seat and its delivery acked."""

        def done() -> bool:
            h = self.history()
            acked = {
                (e.seat, e.fields.get("stream_seq"))
                for e in h.named("inbox_acked")
                if e.fields.get("outcome") in ("ack", "term")
            }
            for event_id in event_ids:
                commits = [
                    e for e in h.named("seat_turn_committed") if event_id in (e.fields.get("event_ids") or [])
                ]
                if not commits or (commits[0].seat, commits[0].fields.get("stream_seq")) not in acked:
                    return False
            return True

        wait_for(f"events {event_ids} handled", done, timeout=timeout, every=0.25)


def new_id() -> str:
    """A fresh delivery id."""
    return str(uuid.uuid4())
