"""One broker connection per process (FL-2), with the boot waits of FL-28.

The connection reconnects without limit, one second between attempts, and never gives up on the
URL: an outage longer than the lease TTL hands this node's seats to peers, which is intended.
Streams, consumers and every KV bucket ride this one connection.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Literal

import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.js import JetStreamContext

from shared import logs
from shared.config import NodeConfig

from ._embedded import JS_DOMAIN, EmbeddedBroker
from ._errors import BrokerRefused, BrokerUnreachable

__all__ = ["MIN_MAX_PAYLOAD", "BrokerLink", "DomainJetStream", "connect", "open_broker", "wait_jetstream"]

MIN_MAX_PAYLOAD = 8 * 1024 * 1024
"""Smallest server ``max_payload`` accepted, in bytes (FL-3: an event or a node's answer may be 8 MB)."""

_log = logs.get("queue.nats")


class DomainJetStream(JetStreamContext):
    """A JetStream context that reaches the members' JetStream from a leaf, through a domain (FL-144).

    nats-py sends the JetStream API to ``$JS.<domain>.API`` when given a domain, but it writes KV
    entries by publishing to ``$KV.<bucket>.<key>``, a subject a leaf does not route to the
    members' streams (infra-facts §4, S6). Publishing the same message to
    ``$JS.<domain>.API.$KV.<bucket>.<key>`` reaches the bucket with its headers (expected last
    sequence, TTL) intact, so every KV put, create, update and delete goes there. Everything else
    (stream publishes, object chunks, consumers, direct gets) works unchanged over a leaf.

    Args:
        conn: The nats-py connection.
        domain: The members' JetStream domain (:data:`~shared.broker.JS_DOMAIN`).
        timeout: The JetStream API timeout in seconds.
    """

    def __init__(self, conn: Client, *, domain: str, timeout: float = 5.0) -> None:
        super().__init__(conn, domain=domain, timeout=timeout)
        self._kv_prefix = f"$JS.{domain}.API."

    async def publish(self, subject: str, payload: bytes = b"", *args: Any, **kwargs: Any) -> Any:
        """Publish, sending KV writes (``$KV.…``) through the domain's API subject space."""
        if subject.startswith("$KV."):
            subject = self._kv_prefix + subject
        return await super().publish(subject, payload, *args, **kwargs)


@dataclass
class BrokerLink:
    """This process's one link to the broker.

    Attributes:
        nc: The nats-py connection (one per process, FL-2).
        js: Its JetStream context.
        kind: ``member`` (embedded), ``leaf`` or ``client`` (external), FL-21.
        url: The URL dialled.
        embedded: The child broker when ``stream.type: embedded``.
        connected: False while the client is reconnecting (readiness reads it, FL-128).
    """

    nc: Client
    js: JetStreamContext
    kind: Literal["member", "leaf", "client"]
    url: str
    embedded: EmbeddedBroker | None = None
    connected: bool = True
    _track: asyncio.Task[None] | None = field(default=None, repr=False)
    _state: dict[str, Any] = field(default_factory=dict, repr=False)

    async def close(self) -> None:
        """Drain and close the connection, then stop the embedded child (after the node's drain)."""
        self._state["closing"] = True
        if self._track is not None:
            self._track.cancel()
        try:
            if not self.nc.is_closed:
                await asyncio.wait_for(self.nc.drain(), 5.0)
        except (TimeoutError, nats.errors.Error):
            await self.nc.close()
        if self.embedded is not None:
            await self.embedded.stop()


class _Watch:
    """A connection's callbacks: ``state["connected"]`` across disconnects (FL-28), and a line for
    each refused attempt before the first connection (the node is waiting)."""

    def __init__(self, url: str, state: dict[str, Any]) -> None:
        self.url = url
        self.state = state
        self.attempts = 0

    async def on_error(self, e: Exception) -> None:
        """Log an error at debug (nats-py prints a traceback for every refused reconnect, N11)."""
        _log.debug("broker_connection_error", error=f"{type(e).__name__}: {e}")

    async def on_disconnect(self) -> None:
        """Mark the connection down; logged unless the process is closing it."""
        self.state["connected"] = False
        if not self.state.get("closing"):
            _log.warning("broker_disconnected", url=self.url)

    async def on_reconnect(self) -> None:
        """Mark the connection up again."""
        self.state["connected"] = True
        _log.info("broker_reconnected", url=self.url)

    async def on_connect_error(self, e: Exception) -> None:
        """Count a refused attempt before the first connection (a line at the 1st and every 10th)."""
        if not self.state.get("up"):
            self.attempts += 1
            if self.attempts == 1 or self.attempts % 10 == 0:
                _log.warning(
                    "broker_connect_retrying",
                    url=self.url,
                    attempts=self.attempts,
                    error=f"{type(e).__name__}: {e}",
                )
        await self.on_error(e)


def _auth(*, token: str, creds: str, tls_ca: str, tls_cert: str, tls_key: str) -> dict[str, Any]:
    """The client's credential options: a token, a creds file, TLS (mutual with a cert and key)."""
    kwargs: dict[str, Any] = {}
    if token:
        kwargs["token"] = token
    if creds:
        kwargs["user_credentials"] = creds
    if tls_ca or tls_cert:
        import ssl

        ctx = ssl.create_default_context(cafile=tls_ca or None)
        if tls_cert:
            ctx.load_cert_chain(tls_cert, tls_key)
        kwargs["tls"] = ctx
    return kwargs


async def connect(
    url: str,
    *,
    timeout: float,
    name: str,
    token: str = "",
    creds: str = "",
    tls_ca: str = "",
    tls_cert: str = "",
    tls_key: str = "",
) -> tuple[Client, dict[str, Any]]:
    """Dial ``url`` (a comma-separated failover set) and return the connection.

    Args:
        url: One URL or a comma-separated list; passed to the client in order.
        timeout: Seconds to keep trying before giving up (FL-28: 30 s solo, 120 s clustered).
        name: The client name the server shows (the node id).
        token: Optional auth token.
        creds: Optional creds file.
        tls_ca: Optional CA file; with ``tls_cert``/``tls_key`` for mutual TLS.
        tls_cert: Optional client certificate.
        tls_key: Optional client key.

    Returns:
        ``(connection, state)`` where ``state["connected"]`` tracks disconnects.

    Raises:
        BrokerUnreachable: nobody answered within ``timeout``.
        BrokerRefused: the server's ``max_payload`` is below 8 MB.
    """
    state: dict[str, Any] = {"connected": True}
    watch = _Watch(url, state)
    servers = [u.strip() for u in url.split(",") if u.strip()]
    kwargs = _auth(token=token, creds=creds, tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key)
    deadline = time.monotonic() + timeout
    try:
        # nats-py retries the initial connect forever with unlimited reconnects: the budget is ours
        nc = await asyncio.wait_for(
            nats.connect(
                servers=servers,
                name=name,
                dont_randomize=True,
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=1,
                connect_timeout=2,
                error_cb=watch.on_connect_error,
                disconnected_cb=watch.on_disconnect,
                reconnected_cb=watch.on_reconnect,
                **kwargs,
            ),
            timeout=max(0.1, deadline - time.monotonic()),
        )
    except (TimeoutError, nats.errors.NoServersError, OSError, nats.errors.Error) as e:
        raise BrokerUnreachable(
            f"no NATS server answered at {url} within {timeout:.0f} s ({type(e).__name__} after {watch.attempts} attempts)"
        ) from None
    state["up"] = True
    if nc.max_payload < MIN_MAX_PAYLOAD:
        await nc.close()
        raise BrokerRefused(
            f"the NATS server at {url} has max_payload {nc.max_payload} bytes; crewlet needs at least "
            f"{MIN_MAX_PAYLOAD} (8 MB): set max_payload: 8MB on every server"
        )
    return nc, state


async def wait_jetstream(js: JetStreamContext, *, timeout: float = 60.0) -> None:
    """Wait until JetStream answers this client (FL-28: the metadata leader answers).

    Raises:
        BrokerUnreachable: JetStream did not answer within ``timeout`` seconds.
        BrokerRefused: JetStream is not enabled for this account.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            await js.account_info()
            return
        except nats.js.errors.ServiceUnavailableError as e:
            if time.monotonic() >= deadline:
                raise BrokerRefused(f"JetStream is not available on this account: {e}") from None
        except (
            TimeoutError,
            nats.errors.TimeoutError,
            nats.errors.NoRespondersError,
            nats.js.errors.APIError,
        ) as e:
            if time.monotonic() >= deadline:
                raise BrokerUnreachable(f"JetStream did not answer within {timeout:.0f} s ({e})") from None
        await asyncio.sleep(0.25)


async def open_broker(cfg: NodeConfig) -> BrokerLink:
    """Start the embedded broker if configured, connect once, and wait for JetStream.

    Args:
        cfg: The node config.

    Returns:
        The process's broker link.

    Raises:
        EmbeddedBrokerFailed: the child nats-server did not start.
        BrokerUnreachable: nothing answered within the connect or JetStream budget (FL-28).
        BrokerRefused: the server is unfit (``max_payload`` below 8 MB, no JetStream).
    """
    clustered = cfg.clustered or cfg.stream.replicas > 1
    connect_budget = 120.0 if clustered else 30.0
    embedded: EmbeddedBroker | None = None
    if cfg.stream.type == "embedded":
        embedded = EmbeddedBroker(cfg)
        url = await embedded.start(timeout=connect_budget)
    else:
        url = cfg.stream.url
    try:
        tls = cfg.stream.tls
        nc, state = await connect(
            url,
            timeout=connect_budget,
            name=cfg.node_id,
            token=cfg.stream.token,
            creds=cfg.stream.credentials,
            tls_ca=tls.ca if tls else "",
            tls_cert=tls.cert if tls else "",
            tls_key=tls.key if tls else "",
        )
        # a leaf reaches the members' JetStream only through their domain (FL-144, infra-facts S6)
        js = DomainJetStream(nc, domain=JS_DOMAIN) if cfg.broker_kind == "leaf" else nc.jetstream(timeout=5.0)
        await wait_jetstream(js, timeout=60.0)
    except BaseException:
        if embedded is not None:
            await embedded.stop()
        raise
    link = BrokerLink(nc=nc, js=js, kind=cfg.broker_kind, url=url, embedded=embedded, _state=state)

    async def track() -> None:
        # keep `connected` current for /ready (FL-128) without a second connection
        while not nc.is_closed:
            link.connected = bool(state["connected"]) and nc.is_connected
            await asyncio.sleep(0.25)

    link._track = asyncio.create_task(track(), name="broker-link-state")
    _log.info("broker_connected", url=url, kind=link.kind, max_payload=nc.max_payload)
    return link
