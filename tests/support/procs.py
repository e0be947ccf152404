"""Start real processes for tests (nats-server, crewlet nodes) and stop them by PID.

Every process is started in its own session so a test can signal it precisely; :meth:`stop`
SIGKILLs whatever survives its grace period. Fixtures call :meth:`stop` in a finalizer, so a
failing test leaves nothing running.
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared"
VENV_BIN = Path(sys.executable).parent
TOKEN = "test-token-0123456789-abcdefghijkl"
TEST_KEY = "0+wIc4cfqPukveOK5Vlcm9HjyADVViFUTNoaDKlVosY="
"""The test fleet's keyring material (base64 of 32 bytes): every node a test starts holds it (CO-40)."""
TEST_KEYRING = {"active_key_id": "test", "keys": [{"id": "test", "material": TEST_KEY}]}


_HANDED_OUT: set[int] = set()
"""Ports :func:`free_port` returned in this process: never handed out twice."""


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_slice() -> range:
    """The ports this test process picks from: below the kernel's ephemeral range, one slice per worker.

    Binding port 0 hands out an *ephemeral* port, the same pool every outgoing connection's source
    port comes from: between the pick and a child's bind, any client on the machine (a node dialling
    the broker, a test's httpx call) may take it. CI once lost a rehearsal that way (``api.port
    54529 ... already in use``). Ports below ``ip_local_port_range`` are never handed to outgoing
    connections, and each pytest-xdist worker (``PYTEST_XDIST_WORKER=gwN``) gets its own slice of
    them, so two workers never race for one port either (infra-facts P1 narrowed, not closed: a
    process outside the tests may still listen there, which the bind check catches).
    """
    low = max(_ephemeral_low(), 12000)
    base = 10000
    workers = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1), 1)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    width = (low - base) // workers
    start = base + (index % workers) * width
    return range(start, start + width)


def port_bindable(port: int) -> bool:
    """True when ``port`` can be bound on 127.0.0.1 right now."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(within: range | None = None) -> int:
    """Return a loopback port that was free a moment ago and is not ephemeral (see :func:`port_slice`).

    Args:
        within: Pick from these ports instead of this worker's whole slice.

    Raises:
        RuntimeError: no bindable port was found in 500 tries.
    """
    ports = within if within is not None and len(within) else port_slice()
    for _ in range(500):
        port = random.choice(ports)
        if port in _HANDED_OUT or not port_bindable(port):
            continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free loopback port in {ports.start}..{ports.stop - 1}")


def hold_port(port: int) -> None:
    """Never hand ``port`` out from :func:`free_port` in this process (a server derives it itself)."""
    _HANDED_OUT.add(port)


def pid_alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def children_named(pid: int, name: str) -> list[int]:
    """PIDs of live processes named ``name`` whose parent is ``pid``."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        if ppid == pid and comm == name:
            out.append(int(d.name))
    return out


class Proc:
    """A child process started for a test, stopped by PID."""

    def __init__(
        self, args: list[str], *, log: Path, env: dict[str, str] | None = None, cwd: Path | None = None
    ):
        self.log_path = log
        self._log = open(log, "ab")  # noqa: SIM115 - closed in stop()
        self.popen = subprocess.Popen(
            args,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **(env or {})},
            cwd=cwd,
            start_new_session=True,
        )
        self.pid = self.popen.pid

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the process (not its group)."""
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` s; return the exit code or None."""
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, *, grace: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL after ``grace`` s; also kill anything left in its session."""
        if self.popen.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            if self.wait(grace) is None:
                self.signal(signal.SIGKILL)
                self.wait(5)
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._log.close()
        return self.popen.returncode

    def output(self) -> str:
        """Everything the process printed so far."""
        return self.log_path.read_text(errors="replace")

    def events(self) -> list[dict[str, Any]]:
        """The JSON log lines the process printed, parsed."""
        out = []
        for line in self.output().splitlines():
            line = line.strip()
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out


class NatsServer(Proc):
    """A real nats-server with JetStream on 127.0.0.1 (a port it picks), store under ``dir``."""

    def stop(self, *, grace: float = 3.0) -> int | None:
        """Stop it (a test's server holds nothing worth a long graceful shutdown)."""
        return super().stop(grace=grace)

    def __init__(self, dir: Path, *, max_payload: str = "8MB", name: str = "test-nats", extra: str = ""):
        dir.mkdir(parents=True, exist_ok=True)
        conf = dir / "nats.conf"
        conf.write_text(
            f'server_name: "{name}"\nlisten: "127.0.0.1:-1"\nmax_payload: {max_payload}\n'
            f'ports_file_dir: "{dir}"\njetstream {{ store_dir: "{dir / "js"}" }}\n{extra}\n'
        )
        super().__init__([str(VENV_BIN / "nats-server"), "-c", str(conf)], log=dir / "nats.log")
        deadline = time.monotonic() + 10
        ports = dir / f"nats-server_{self.pid}.ports"
        while time.monotonic() < deadline:
            if ports.exists():
                try:
                    self.url = json.loads(ports.read_text())["nats"][0]
                    return
                except (ValueError, KeyError, IndexError):
                    pass
            time.sleep(0.01)
        self.stop()
        raise RuntimeError(f"nats-server did not start: {self.output()}")


class Node(Proc):
    """A crewlet node process on loopback."""

    def __init__(self, args: list[str], *, dir: Path, port: int, env: dict[str, str] | None = None):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        dir.mkdir(parents=True, exist_ok=True)
        super().__init__(
            [str(VENV_BIN / "crewlet"), *args],
            log=dir / "node.log",
            env={"CREWLET_API_TOKEN": TOKEN, **(env or {})},
            cwd=dir,
        )

    def get(self, path: str, *, token: str | None = TOKEN, timeout: float = 5.0) -> httpx.Response:
        """GET ``path`` on this node."""
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.get(self.url + path, headers=headers, timeout=timeout)

    def wait_ready(self, timeout: float = 30.0) -> dict[str, Any]:
        """Wait for ``/ready`` 200; fail with the node's log when it exits or times out."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                raise AssertionError(
                    f"node exited {self.popen.returncode} before ready:\n{self.output()[-4000:]}"
                )
            try:
                r = self.get("/ready", token=None, timeout=2.0)
                if r.status_code == 200:
                    return dict(r.json())
                last = r.text
            except httpx.HTTPError as e:
                last = str(e)
            time.sleep(0.05)
        raise AssertionError(f"node not ready in {timeout} s ({last}):\n{self.output()[-4000:]}")


def write_yaml(path: Path, data: Any) -> Path:
    """Write ``data`` as YAML to ``path`` and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def node_file(dir: Path, *, node_id: str, port: int, **sections: Any) -> Path:
    """Write a node file for a test node (token from ``CREWLET_API_TOKEN``, keyring :data:`TEST_KEYRING`)
    and return its path. ``secrets=None`` leaves the keyring out."""
    data: dict[str, Any] = {
        "node": {"id": node_id},
        "store": {"dir": str(dir / "store")},
        "api": {
            "host": "127.0.0.1",
            "port": port,
            "auth": {"tokens": [{"id": "test", "token": "${CREWLET_API_TOKEN}"}]},
        },
        "secrets": TEST_KEYRING,
    }
    for key, value in sections.items():
        if value is None:
            data.pop(key, None)
        elif isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return write_yaml(dir / "crewlet.yaml", data)
