"""A 3-member nats-server cluster on 127.0.0.1 for fleet tests, every member stopped by PID.

Members are named ``n1``..``n3``, with routes between all of them, JetStream with a store dir each,
``max_payload: 8MB`` (FL-3), and a monitoring port each. Ports are fixed per member for the
cluster's life, so a killed member restarts on the same client URL and the comma-separated
failover set handed to nodes stays valid. :meth:`NatsCluster.wait_ready` waits until every member
names the JetStream meta leader (infra-facts §3: elected in 0.13–0.51 s) and a client's
``account_info`` answers (N13: the JS API may time out for ~1.5 s after the leader shows up).
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import nats
import nats.errors
import nats.js.errors

from tests.support.procs import VENV_BIN, Proc, free_port

__all__ = ["ClusterMember", "NatsCluster"]


class ClusterMember:
    """One member's fixed identity (name, ports, dirs) and its current process, if running."""

    def __init__(self, name: str, root: Path, *, client: int, route: int, monitor: int) -> None:
        self.name = name
        self.dir = root / name
        self.client_port = client
        self.route_port = route
        self.monitor_port = monitor
        self.url = f"nats://127.0.0.1:{client}"
        self.proc: Proc | None = None

    def write_config(self, routes: list[str]) -> Path:
        self.dir.mkdir(parents=True, exist_ok=True)
        conf = {
            "server_name": self.name,
            "listen": f"127.0.0.1:{self.client_port}",
            "http": f"127.0.0.1:{self.monitor_port}",
            "max_payload": 8 * 1024 * 1024,
            "jetstream": {
                "store_dir": str(self.dir / "js"),
                "max_memory_store": 256 * 1024 * 1024,
                "max_file_store": 2 * 1024 * 1024 * 1024,
            },
            "cluster": {"name": "C1", "listen": f"127.0.0.1:{self.route_port}", "routes": routes},
        }
        path = self.dir / "nats.conf"
        path.write_text(json.dumps(conf, indent=2))
        return path

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.popen.poll() is None


class NatsCluster:
    """Three nats-server members ``n1``..``n3`` on loopback (started again on fresh ports, up to
    ``attempts`` times, when a port was taken between picking and binding it: infra-facts P1).

    Args:
        root: Directory for the members' configs, stores and logs.
        size: Members (3).
    """

    def __init__(self, root: Path, *, size: int = 3, attempts: int = 3) -> None:
        for attempt in range(1, attempts + 1):
            # free_port() has a small race (infra-facts P1): a port taken meanwhile fails one
            # member's bind; start again on fresh ports in a fresh directory
            where = root if attempt == 1 else root.with_name(f"{root.name}-{attempt}")
            try:
                self._start_all(where, size)
                return
            except RuntimeError as e:
                if "address already in use" not in str(e) or attempt == attempts:
                    raise

    def _start_all(self, root: Path, size: int) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.members = [
            ClusterMember(f"n{i + 1}", root, client=free_port(), route=free_port(), monitor=free_port())
            for i in range(size)
        ]
        self._routes = [f"nats://127.0.0.1:{m.route_port}" for m in self.members]
        try:
            for m in self.members:
                self.start(m.name)
            self.wait_ready()
        except BaseException:
            self.stop()
            raise

    @property
    def urls(self) -> str:
        """The comma-separated client URLs (a node's ``stream.url``)."""
        return ",".join(m.url for m in self.members)

    def member(self, name: str) -> ClusterMember:
        return next(m for m in self.members if m.name == name)

    def start(self, name: str) -> None:
        """Start (or restart) member ``name`` with its fixed ports and store."""
        m = self.member(name)
        conf = m.write_config(self._routes)
        m.proc = Proc([str(VENV_BIN / "nats-server"), "-c", str(conf)], log=m.dir / "nats.log")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if m.proc.popen.poll() is not None:
                raise RuntimeError(f"nats-server {name} exited: {m.proc.output()[-2000:]}")
            try:
                if httpx.get(f"http://127.0.0.1:{m.monitor_port}/healthz", timeout=1).status_code < 600:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.02)
        raise RuntimeError(f"nats-server {name} did not open its monitor port")

    def kill(self, name: str) -> None:
        """SIGKILL member ``name`` (by PID)."""
        m = self.member(name)
        if m.proc is not None:
            m.proc.signal(9)
            m.proc.wait(5)
            m.proc.stop(grace=0)

    def meta_leader(self) -> str:
        """The meta leader as the first running member sees it ('' when none)."""
        for m in self.members:
            if not m.running:
                continue
            try:
                jsz = httpx.get(f"http://127.0.0.1:{m.monitor_port}/jsz", timeout=1).json()
            except (httpx.HTTPError, ValueError):
                continue
            return str((jsz.get("meta_cluster") or {}).get("leader") or "")
        return ""

    def wait_healthy(self, timeout: float = 60.0) -> float | None:
        """Wait until every running member's bare ``/healthz`` answers 200: on a JetStream server it
        runs the whole health suite, so every stream and consumer it holds has a leader and its
        replica is current (a member that just restarted is caught up, the elections its loss
        started are over).

        Returns:
            Seconds waited, or None when some member was still unhealthy after ``timeout``.
        """
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            ok = True
            for m in self.members:
                if not m.running:
                    continue
                try:
                    ok = httpx.get(f"http://127.0.0.1:{m.monitor_port}/healthz", timeout=1).status_code == 200
                except httpx.HTTPError:
                    ok = False
                if not ok:
                    break
            if ok:
                return time.monotonic() - start
            time.sleep(0.1)
        return None

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until every running member names the meta leader and JetStream answers a client."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leaders = set()
            for m in self.members:
                if not m.running:
                    continue
                try:
                    jsz = httpx.get(f"http://127.0.0.1:{m.monitor_port}/jsz", timeout=1).json()
                    leaders.add(str((jsz.get("meta_cluster") or {}).get("leader") or ""))
                except (httpx.HTTPError, ValueError):
                    leaders.add("")
            if leaders and "" not in leaders and len(leaders) == 1:
                break
            time.sleep(0.05)
        else:
            raise RuntimeError("the cluster elected no JetStream meta leader in time")
        with ThreadPoolExecutor(1) as pool:  # callable from inside a running event loop too
            pool.submit(asyncio.run, self._account_info(deadline)).result()

    async def _account_info(self, deadline: float) -> None:
        nc = await nats.connect(servers=[m.url for m in self.members if m.running], connect_timeout=2)
        try:
            js = nc.jetstream(timeout=2.0)
            while True:
                try:
                    await js.account_info()
                    return
                except (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.APIError):
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
        finally:
            await nc.close()

    def stop(self) -> None:
        """Stop every member by PID (SIGTERM, then SIGKILL): all are told at once, then each is
        waited for, so a module's teardown takes the slowest member's shutdown, not the sum."""
        procs = [m.proc for m in self.members if m.proc is not None]
        for proc in procs:
            if proc.popen.poll() is None:
                proc.signal(signal.SIGTERM)
        for proc in procs:
            proc.stop(grace=5)
