"""A NATS-protocol-aware TCP proxy on loopback: the fault injector between one node and the cluster.

Each fleet node dials its own proxy (``stream.url`` names only the proxy), which forwards to the
first cluster member that accepts, so the node's one broker connection passes through the test.
The proxy parses both directions into protocol operations (``PUB``/``HPUB`` and ``MSG``/``HMSG``
with their payloads, and control lines) and can:

- strip ``connect_urls`` from the server's ``INFO``, so the client never learns the members'
  own addresses and every reconnect comes back through the proxy (otherwise nats-py would add
  them to its pool and bypass a cut);
- **cut** the link: close every connection and refuse new ones until :meth:`restore` (a broker
  lost to this node only, while the rest of the fleet keeps its links);
- **hold an ack**: once armed with a seat, stop forwarding the client's bytes at the first
  ack (``+ACK``, or the empty body nats-py's ``ack_sync`` sends) published to a ``$JS.ACK.``
  subject of that seat's consumer. The ack never reaches the
  broker while everything the node wrote before it did — the precise moment "after the turn's
  side effects, before the ack" that a kill -9 must land in (FL-88).

Threads only; every socket is closed by :meth:`stop`.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Callable

__all__ = ["NatsProxy", "split_ops"]

_WITH_PAYLOAD = {b"PUB", b"MSG", b"HPUB", b"HMSG"}


def split_ops(buf: bytearray) -> list[tuple[bytes, bytes]]:
    """Cut every complete protocol operation off the front of ``buf``.

    Returns:
        ``(op name, whole operation bytes)`` pairs, in order; an incomplete tail stays in ``buf``.
    """
    out: list[tuple[bytes, bytes]] = []
    while True:
        end = buf.find(b"\r\n")
        if end < 0:
            return out
        line = bytes(buf[:end])
        parts = line.split()
        name = parts[0].upper() if parts else b""
        size = end + 2
        if name in _WITH_PAYLOAD:
            size += int(parts[-1]) + 2
            if len(buf) < size:
                return out
        out.append((name, bytes(buf[:size])))
        del buf[:size]


def _strip_info(op: bytes) -> bytes:
    try:
        info = json.loads(op[5:].strip())
    except ValueError:
        return op
    info.pop("connect_urls", None)
    info.pop("ws_connect_urls", None)
    return b"INFO " + json.dumps(info, separators=(",", ":")).encode() + b"\r\n"


class _Link:
    def __init__(self, proxy: NatsProxy, client: socket.socket, upstream: socket.socket) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream = upstream
        self.closed = threading.Event()
        self.holding = False
        for target in (self._up, self._down):
            threading.Thread(target=target, daemon=True).start()

    def close(self) -> None:
        self.closed.set()
        for s in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()

    def _pump(self, src: socket.socket, on_ops: Callable[[bytearray], bytes]) -> None:
        buf = bytearray()
        try:
            while not self.closed.is_set():
                chunk = src.recv(65536)
                if not chunk:
                    break
                buf += chunk
                out = on_ops(buf)
                if out:
                    (self.upstream if src is self.client else self.client).sendall(out)
        except OSError:
            pass
        self.close()

    def _up(self) -> None:
        def ops(buf: bytearray) -> bytes:
            out = bytearray()
            for name, op in split_ops(buf):
                if not self.holding and self.proxy._is_held_ack(name, op):
                    self.holding = True
                    self.proxy.held.set()
                if not self.holding:
                    out += op
            return bytes(out)

        self._pump(self.client, ops)

    def _down(self) -> None:
        def ops(buf: bytearray) -> bytes:
            out = bytearray()
            for name, op in split_ops(buf):
                out += _strip_info(op) if name == b"INFO" else op
            return bytes(out)

        self._pump(self.upstream, ops)


class NatsProxy:
    """A loopback proxy in front of a NATS cluster for one node.

    Args:
        upstreams: The members' ``(host, port)``, tried in order for every new connection.

    Attributes:
        url: ``nats://127.0.0.1:<port>``: the node's ``stream.url``.
        held: Set once an armed ack was held back (see :meth:`hold_ack`).
    """

    def __init__(self, upstreams: list[tuple[str, int]]) -> None:
        self.upstreams = upstreams
        self.held = threading.Event()
        self._seat: str | None = None
        self._cut = False
        self._links: list[_Link] = []
        self._lock = threading.Lock()
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.url = f"nats://127.0.0.1:{self._listener.getsockname()[1]}"
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                cut = self._cut
            upstream = None if cut else self._dial()
            if upstream is None:
                with contextlib.suppress(OSError):
                    client.close()
                continue
            with self._lock:
                self._links = [lk for lk in self._links if not lk.closed.is_set()]
                self._links.append(_Link(self, client, upstream))

    def _dial(self) -> socket.socket | None:
        for host, port in self.upstreams:
            try:
                upstream = socket.create_connection((host, port), timeout=1.0)
            except OSError:
                continue
            upstream.settimeout(None)  # the dial timeout must not become an idle timeout
            return upstream
        return None

    def _is_held_ack(self, name: bytes, op: bytes) -> bool:
        seat = self._seat
        if seat is None or name not in (b"PUB", b"HPUB"):
            return False
        head, _, rest = op.partition(b"\r\n")
        subject = head.split()[1]
        return (
            subject.startswith(b"$JS.ACK.")
            and f".agent-{seat}__".encode() in subject
            and rest.rstrip(b"\r\n").split(b"\r\n")[-1] in (b"", b"+ACK")  # nats-py's ack_sync sends b""
        )

    def hold_ack(self, seat: str) -> None:
        """Arm the gate: the first ack of ``seat``'s inbox, and everything after it, is held."""
        self.held.clear()
        self._seat = seat

    def cut(self) -> None:
        """Close every link and refuse new ones until :meth:`restore`."""
        with self._lock:
            self._cut = True
            links, self._links = self._links, []
        for link in links:
            link.close()

    def restore(self) -> None:
        """Accept and forward again; disarm the ack gate."""
        with self._lock:
            self._cut = False
        self._seat = None

    def stop(self) -> None:
        """Close the listener and every link."""
        self._stopped = True
        with contextlib.suppress(OSError):
            self._listener.close()
        self.cut()
