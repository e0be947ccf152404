"""What the figures run against: generated companies, node files, and the processes they start.

Processes come from ``tests/support`` (``Proc``, ``NatsServer``, ``Node``, ``NatsCluster``): each is
started in its own session and stopped by PID (SIGTERM, then SIGKILL, then its whole session), and
every one a figure starts is registered on an :class:`contextlib.ExitStack` so it is stopped even
when the figure fails. Everything binds 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import statistics
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import httpx
import nats
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig

from shared.bus import AGENT_STREAM, STREAMS
from tests.support.cluster import NatsCluster
from tests.support.procs import REPO, SHARED, TOKEN, NatsServer, Node, Proc, free_port, node_file, write_yaml

__all__ = [
    "AGENT_MAX_CONSUMERS",
    "AUTH",
    "KNOWLEDGE_DIR",
    "PROJECT",
    "REPO",
    "SHARED",
    "TOKEN",
    "WEBHOOK_SECRET",
    "NatsCluster",
    "NatsServer",
    "Node",
    "Proc",
    "cpu_seconds",
    "free_port",
    "handles",
    "nats_server",
    "node_file",
    "precreate_agent_store",
    "precreate_agent_stream",
    "rss_mb",
    "start_bare",
    "start_llm",
    "start_node",
    "wait_held",
    "write_company",
]

AUTH = {"Authorization": f"Bearer {TOKEN}"}
PROJECT = "BEN"
"""The tracker project and knowledge space every generated company has."""
WEBHOOK_SECRET = "bench-webhook-secret-0123456789"
KNOWLEDGE_DIR = SHARED / "data" / "knowledge"
"""The shared knowledge pages figure 7 shuffles (the repo's own Markdown is used when it is absent)."""


def handles(n: int) -> list[str]:
    """The seat handles of a generated company of ``n`` agent seats: ``s0000``, ``s0001``, ..."""
    return [f"s{i:04d}" for i in range(n)]


def write_company(
    path: Path,
    *,
    seats: int,
    llm_url: str | None = None,
    max_tool_rounds: int = 24,
) -> Path:
    """Write a company of ``seats`` agent seats in one unit (project and space ``BEN``).

    Args:
        path: Where to write the company file (an offline script is written beside it).
        seats: Agent seats; 0 leaves only the human owner.
        llm_url: The scripted model server (``http://127.0.0.1:P``); None uses the offline
            provider (seats that never run a turn).
        max_tool_rounds: ``turn_engine.max_tool_rounds``.

    Returns:
        ``path``.
    """
    if llm_url is None:
        write_yaml(path.parent / "offline-script.yaml", {"rules": [], "default": {"final": "idle"}})
        provider: dict[str, Any] = {
            "type": "offline",
            "model": "crewlet-offline-1",
            "script": "./offline-script.yaml",
        }
    else:
        provider = {
            "type": "openai-compatible",
            "model": "bench-model",
            "base_url": f"{llm_url}/v1",
            "api_keys": ["bench-key-0123456789"],
        }
    roles = [{"name": f"Seat {h}", "handle": h, "llm": ["default"], "goal": "Answer"} for h in handles(seats)]
    doc: dict[str, Any] = {
        "name": "Bench Company",
        "timezone": "UTC",
        "providers": {"llm": {"default": provider}},
        "roles": [{"name": "Bench Owner", "handle": "owner", "kind": "human"}],
        "units": [{"id": "bench", "name": "Bench", "project": PROJECT, "space": PROJECT, "roles": roles}],
        "turn_engine": {"max_tool_rounds": max_tool_rounds},
    }
    if seats:
        doc["integrations"] = {
            "webhooks": [
                {
                    "source": "bench",
                    "secret": WEBHOOK_SECRET,
                    "route_to": handles(1)[0],
                    "text_pointer": "/text",
                }
            ]
        }
    return write_yaml(path, doc)


AGENT_MAX_CONSUMERS = 10_000
"""``max_consumers`` of the ``CREWLET_AGENT`` stream the benchmark pre-creates for 1 000 seats.

nats-server 2.15.1 caps a stream that does not set ``max_consumers`` at 1 000 consumers (error 10026
"maximum consumers limit reached"). A seat has two mailboxes on ``CREWLET_AGENT``, so as the engine
stands a company of more than 500 agent seats cannot boot. The figures at 1 000 seats pre-create the
stream with the engine's own shape plus this limit (``Bus.provision`` adopts an existing stream of
the same retention, subjects, replicas and age), and say so in their parameters.
"""


async def precreate_agent_stream(js: JetStreamContext, *, replicas: int) -> None:
    """Create ``CREWLET_AGENT`` as ``shared.bus`` would, with ``max_consumers`` raised (see above)."""
    spec = next(s for s in STREAMS if s.name == AGENT_STREAM)
    await js.add_stream(
        StreamConfig(
            name=spec.name,
            description=spec.holds,
            subjects=list(spec.subjects),
            retention=RetentionPolicy.INTEREST,
            storage=StorageType.FILE,
            num_replicas=replicas,
            max_consumers=AGENT_MAX_CONSUMERS,
        )
    )


def precreate_agent_store(store_dir: Path) -> None:
    """Pre-create ``CREWLET_AGENT`` (raised ``max_consumers``) in a JetStream store an embedded broker will open.

    A standalone nats-server is started on ``store_dir``, the stream created, the server stopped;
    the node's embedded broker then finds the stream in its ``stream.store_dir``.
    """
    tmp = store_dir.parent / f"{store_dir.name}-precreate"
    srv = NatsServer(tmp, name="bench-precreate")
    try:

        async def go() -> None:
            nc = await nats.connect(srv.url)
            try:
                await precreate_agent_stream(nc.jetstream(), replicas=1)
            finally:
                await nc.close()

        asyncio.run(go())
    finally:
        srv.stop()
    shutil.move(str(tmp / "js"), str(store_dir))


def nats_server(stack: contextlib.ExitStack, root: Path, *, name: str = "bench-nats") -> NatsServer:
    """Start one R1 nats-server (JetStream, the server's default sync) and register its stop."""
    srv = NatsServer(root, name=name)
    stack.callback(srv.stop)
    return srv


def _port_line(proc: Proc, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for line in proc.output().splitlines():
            if line.startswith("PORT "):
                return int(line.split()[1])
        if proc.popen.poll() is not None:
            break
        time.sleep(0.02)
    raise RuntimeError(f"{proc.popen.args!r} printed no port: {proc.output()[-2000:]}")


def start_llm(stack: contextlib.ExitStack, root: Path, *, delay: float, mode: str) -> str:
    """Start the scripted model server process (:mod:`bench._llm`); return its base URL."""
    root.mkdir(parents=True, exist_ok=True)
    proc = Proc(
        [sys.executable, "-m", "bench._llm", "--delay", str(delay), "--mode", mode, "--project", PROJECT],
        log=root / f"llm-{mode}-{delay}.log",
        cwd=REPO,
    )
    stack.callback(proc.stop)
    return f"http://127.0.0.1:{_port_line(proc)}"


def start_bare(stack: contextlib.ExitStack, root: Path) -> str:
    """Start the bare FastAPI floor (:mod:`bench._bare`) and wait for it; return its URL."""
    root.mkdir(parents=True, exist_ok=True)
    port = free_port()
    proc = Proc([sys.executable, "-m", "bench._bare", "--port", str(port)], log=root / "bare.log", cwd=REPO)
    stack.callback(proc.stop)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.popen.poll() is not None:
            break
        try:
            if httpx.get(url + "/ping", timeout=1).status_code == 200:
                return url
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"the bare FastAPI floor did not start: {proc.output()[-2000:]}")


def start_node(
    stack: contextlib.ExitStack,
    root: Path,
    *,
    node_id: str,
    company: Path,
    nats_url: str | None,
    replicas: int = 1,
    coordination: str = "embedded-kv",
    js_store: Path | None = None,
    roles: Iterable[str] = ("data", "ingress", "seats", "workers"),
    max_concurrent: int = 32,
    lease_ttl: float = 45.0,
    ready_timeout: float = 120.0,
) -> Node:
    """Start one crewlet node process and wait for ``/ready``.

    With ``nats_url`` the node dials the broker the benchmark started (``stream.type: nats``), so
    the benchmark can watch the same KV buckets and streams and publish raw floors there; with
    None it spawns its own embedded broker (``stream.type: embedded``, the ``crewlet run`` shape).
    """
    d = root / node_id
    port = free_port()
    cfg = node_file(
        d,
        node_id=node_id,
        port=port,
        node={"roles": list(roles), "max_concurrent": max_concurrent},
        stream={"type": "nats", "url": nats_url, "replicas": replicas}
        if nats_url
        else {"type": "embedded", "store_dir": str(js_store or "")},
        coordination={"type": coordination, "lease_ttl_seconds": lease_ttl},
    )
    node = Node(["node", "--node", str(cfg), "--company", str(company)], dir=d, port=port)
    stack.callback(node.stop)
    node.wait_ready(ready_timeout)
    return node


def wait_held(node: Node, seats: int, timeout: float) -> float:
    """Wait until ``node`` reports ``seats`` held seats on ``/health``; return the seconds it took.

    Raises:
        RuntimeError: not all held in time (the node's log tail is attached).
    """
    start = time.monotonic()
    deadline = start + timeout
    count = -1
    while time.monotonic() < deadline:
        if node.popen.poll() is not None:
            raise RuntimeError(f"node exited {node.popen.returncode}: {node.output()[-3000:]}")
        try:
            count = int(node.get("/health", timeout=5).json()["seats"]["count"])
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        if count >= seats:
            return time.monotonic() - start
        time.sleep(0.2)
    raise RuntimeError(f"node holds {count} of {seats} seats after {timeout:.0f} s: {node.output()[-3000:]}")


def rss_mb(pid: int) -> float:
    """Resident set size of ``pid`` in MB (``VmRSS`` of ``/proc/<pid>/status``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"no VmRSS for pid {pid}")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds ``pid`` has used (``/proc/<pid>/stat``)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def median_ms(xs: list[float]) -> float:
    """Median of seconds, in ms."""
    return statistics.median(xs) * 1000
