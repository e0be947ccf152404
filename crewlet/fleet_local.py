"""``make fleet-local``: three nodes on one machine, clustered, in the foreground until Ctrl-C.

Writes three node files (``node-1``..``node-3``: all four roles, an embedded nats-server each,
clustered with the other two on loopback route ports, ``stream.replicas: 3``) under the data
directory, starts the three ``crewlet node`` processes at the same time (the cluster forms once two
are up, as an orchestrator would start them), waits until every node answers ``/ready``, and prints
each node's URL, PID and log, the fleet as node-1 sees it, and how to stop one node to watch its
seats move. Ctrl-C drains all three (each says when it stopped); a second Ctrl-C stops them at once.

Environment (each optional):

- ``CREWLET_API_TOKEN``: the API token of all three nodes; else one is made at the first start and
  kept in ``<data dir>/token`` (mode 0600), so a restart keeps it.
- ``CREWLET_SECRETS_KEY``: the fleet's keyring material (every node holds the same key, CO-40);
  else kept in ``<data dir>/secrets.key`` (0600) the same way.
- ``GITHUB_WEBHOOK_SECRET``, ``FORMS_WEBHOOK_SECRET``: the example company's webhook secrets; kept
  the same way when unset.
- ``CREWLET_PORT``: node-1's API port (default 8081; node-2 and node-3 take the next two).
- ``CREWLET_ROUTE_PORT``: node-1's cluster route port (default 16221; the next two likewise).
- ``CREWLET_DATA_DIR``: where node files, stores and logs go (default ``./.crewlet/fleet-local``).
- ``CREWLET_COMPANY``: the company file to seed (default ``examples/company.yaml``).

Exit code: 0 when every node stopped cleanly, 2 for unusable settings (a port that is not a number or
is taken), else the first non-zero exit code of a node.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from shared.secrets import generate_key_material

from . import fleet_status
from ._local_settings import SettingError, kept_secret, port_setting

__all__ = ["LocalNode", "SettingError", "main", "node_files", "port_setting"]

REPO = Path(__file__).resolve().parent.parent
NODES = ("node-1", "node-2", "node-3")
READY_TIMEOUT = 120.0
"""Seconds to wait for all three nodes to answer ``/ready`` (a first cluster elects in ~10 s)."""


def node_files(data_dir: Path, api_port: int, route_port: int) -> dict[str, Path]:
    """Write the three node files and return them by node id.

    Args:
        data_dir: The fleet's directory; node ``n`` keeps its store under ``data_dir/n/store``.
        api_port: node-1's API port; node-2 and node-3 take the next two.
        route_port: node-1's cluster route port; the others take the next two.

    Returns:
        Node id → path of its ``crewlet.yaml``.
    """
    files: dict[str, Path] = {}
    routes = {n: route_port + i for i, n in enumerate(NODES)}
    for i, name in enumerate(NODES):
        doc = {
            "node": {"id": name},
            "stream": {
                "type": "embedded",
                "replicas": 3,
                "cluster": {
                    "name": "crewlet-local",
                    "host": "127.0.0.1",
                    "port": routes[name],
                    "peers": [f"nats://127.0.0.1:{routes[o]}" for o in NODES if o != name],
                },
            },
            "coordination": {"type": "embedded-kv"},
            "store": {"dir": str((data_dir / name / "store").resolve())},
            "retention": {"backup_owner": "whoever runs make fleet-local (a local trial fleet)"},
            "api": {
                "host": "127.0.0.1",
                "port": api_port + i,
                "auth": {"tokens": [{"id": "operator", "token": "${CREWLET_API_TOKEN}"}]},
            },
            "secrets": {"active_key_id": "k1", "keys": [{"id": "k1", "material": "${CREWLET_SECRETS_KEY}"}]},
        }
        path = data_dir / name / "crewlet.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        files[name] = path
    return files


@dataclass
class LocalNode:
    """One node process of the local fleet.

    Attributes:
        name: Its node id.
        url: Its API base URL.
        log: Its log file (stdout and stderr).
        proc: The process, once started.
    """

    name: str
    url: str
    log: Path
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self, node_file: Path, company: Path, env: dict[str, str]) -> None:
        """Start ``crewlet node`` in its own session (Ctrl-C reaches this script only)."""
        crewlet = str(Path(sys.executable).parent / "crewlet")
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(
                [crewlet, "node", "--node", str(node_file), "--company", str(company)],
                env=env,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )

    def ready(self) -> bool:
        """True when the node answers ``/ready`` 200."""
        try:
            return httpx.get(self.url + "/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None


def _busy(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _wait_ready(nodes: list[LocalNode]) -> bool:
    deadline = time.monotonic() + READY_TIMEOUT
    waiting = list(nodes)
    while waiting and time.monotonic() < deadline:
        for n in list(waiting):
            if not n.alive():
                print(f"{n.name} exited with {n.proc.returncode if n.proc else '?'}; last log lines:")
                print("\n".join(n.log.read_text(errors="replace").splitlines()[-15:]))
                return False
            if n.ready():
                print(f"  {n.name} ready at {n.url}", flush=True)
                waiting.remove(n)
        time.sleep(0.2)
    for n in waiting:
        print(f"{n.name} did not become ready within {READY_TIMEOUT:.0f} s; see {n.log}")
    return not waiting


def _drain(nodes: list[LocalNode], sig: int = signal.SIGTERM) -> int:
    """Signal every live node and wait for all to exit, printing each stop; return the exit code."""
    for n in nodes:
        if n.alive() and n.proc is not None:
            n.proc.send_signal(sig)
    print("draining: each node finishes its turns, hands its seats back and stops", flush=True)
    code = 0
    started = time.monotonic()
    pending = [n for n in nodes if n.proc is not None]
    while pending:
        for n in list(pending):
            assert n.proc is not None
            if n.proc.poll() is not None:
                rc = n.proc.returncode
                print(f"  {n.name} stopped (exit {rc}) after {time.monotonic() - started:.1f} s", flush=True)
                code = code or (0 if rc in (0, -signal.SIGTERM) else rc)
                pending.remove(n)
        time.sleep(0.2)
    print("stopped")
    return code


def _print_guide(nodes: list[LocalNode], token: str) -> None:
    print()
    fleet_status.show(nodes[0].url, token)
    print("\nThe fleet keeps running. In another shell:")
    print(f"  export CREWLET_API_TOKEN={token}")
    print(f"  make fleet-status CREWLET_URL={nodes[1].url}")
    for n in nodes:
        pid = n.proc.pid if n.proc is not None else "?"
        print(f"  {n.name}: {n.url}  pid {pid}  log {n.log}")
    victim = nodes[1]
    print(f"Stop one node and watch its seats move: kill -TERM {victim.proc.pid if victim.proc else '?'}")
    print("  (a drain hands its seats over at once; kill -9 moves them after the 45 s lease TTL)")
    print("Press Ctrl-C to drain and stop all three.", flush=True)


def _watch(nodes: list[LocalNode], stop: Any) -> None:
    """Until ``stop()`` is true or every node is gone, say when a node stops or comes back ready."""
    up = {n.name: True for n in nodes}
    while not stop() and any(n.alive() for n in nodes):
        for n in nodes:
            if up[n.name] and not n.alive():
                rc = n.proc.returncode if n.proc is not None else "?"
                print(f"{n.name} stopped (exit {rc}); its seats move to the other two", flush=True)
                up[n.name] = False
        time.sleep(0.5)


def _settings() -> tuple[Path, int, int, Path]:
    data_dir = Path(os.environ.get("CREWLET_DATA_DIR") or ".crewlet/fleet-local")
    api = port_setting("CREWLET_PORT", 8081, span=3)
    route = port_setting("CREWLET_ROUTE_PORT", 16221, span=3)
    company = Path(os.environ.get("CREWLET_COMPANY") or REPO / "examples" / "company.yaml")
    if not company.is_file():
        raise SettingError(f"CREWLET_COMPANY={company} is not a file")
    for port in (*range(api, api + 3), *range(route, route + 3)):
        if _busy(port):
            raise SettingError(
                f"port {port} is in use: stop what holds it, or set CREWLET_PORT / CREWLET_ROUTE_PORT"
            )
    return data_dir, api, route, company


def main() -> int:
    """Run the local fleet in the foreground; return the exit code (see the module docstring)."""
    try:
        data_dir, api, route, company = _settings()
    except SettingError as e:
        print(f"fleet-local: {e}", file=sys.stderr)
        return 2
    data_dir.mkdir(parents=True, exist_ok=True)
    kept = {
        "CREWLET_API_TOKEN": ("token", lambda: secrets.token_urlsafe(24)),
        "CREWLET_SECRETS_KEY": ("secrets.key", generate_key_material),
        "GITHUB_WEBHOOK_SECRET": ("github.secret", lambda: secrets.token_hex(16)),
        "FORMS_WEBHOOK_SECRET": ("forms.secret", lambda: secrets.token_hex(16)),
    }
    env = {**os.environ, **{k: kept_secret(data_dir, k, f, make)[0] for k, (f, make) in kept.items()}}
    files = node_files(data_dir, api, route)
    nodes = [
        LocalNode(n, f"http://127.0.0.1:{api + i}", data_dir / n / "node.log") for i, n in enumerate(NODES)
    ]
    print(f"starting three clustered nodes (files and logs under {data_dir})", flush=True)
    for n in nodes:
        n.start(files[n.name], company, env)
    interrupted = False

    def on_signal(*_: Any) -> None:
        nonlocal interrupted
        if interrupted:  # a second Ctrl-C: stop at once
            for n in nodes:
                if n.alive() and n.proc is not None:
                    n.proc.kill()
        interrupted = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    if not _wait_ready(nodes) or interrupted:
        return _drain(nodes) or 1
    _print_guide(nodes, env["CREWLET_API_TOKEN"])
    _watch(nodes, lambda: interrupted)
    return _drain(nodes)


if __name__ == "__main__":
    sys.exit(main())
