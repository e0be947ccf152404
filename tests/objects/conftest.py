"""Fixtures for the object-store tests: one suite over both backends (a parametrized fixture).

``backend`` yields a :class:`Backend` for ``nats`` (a JetStream object store on a per-test
nats-server) and for ``s3`` (a fresh bucket on a session-wide SeaweedFS). Each carries a
``tamper`` that rewrites an object's bytes behind the store's back, keeping its recorded size and
digest, the way a disk fault or a stray writer would.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from shared import broker, objects
from shared.broker import BrokerLink
from shared.config import NodeConfig, node_config_from_data
from tests.support.procs import NatsServer
from tests.support.seaweed import DUMMY_CREDENTIALS, SeaweedS3


def make_cfg(objects_block: dict[str, Any], *, stream: dict[str, Any] | None = None) -> NodeConfig:
    """A validated node config whose ``store.objects`` is ``objects_block``."""
    data: dict[str, Any] = {
        "node": {"id": "objects-test"},
        "api": {"port": 0},
        "store": {"objects": objects_block},
    }
    if stream is not None:
        data["stream"] = stream
    cfg, issues = node_config_from_data(data, env={})
    assert cfg is not None, issues
    return cfg


@dataclass
class Backend:
    """One backend under test.

    Attributes:
        kind: ``nats`` or ``s3``.
        store: The store, opened through :func:`shared.objects.open_object_store`.
        tamper: Rewrites the object's bytes (same length) keeping its recorded size and digest.
        raw: The raw handle (``JetStreamContext`` or boto3 client) for behind-the-back checks.
    """

    kind: str
    store: objects.ObjectStore
    tamper: Callable[[str], Awaitable[None]]
    raw: Any


def flip(data: bytes) -> bytes:
    """The same length, every byte different."""
    return bytes(b ^ 0xFF for b in data)


@pytest.fixture(scope="session")
def seaweed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SeaweedS3]:
    """One SeaweedFS S3 server for the session, stopped by PID at the end."""
    server = SeaweedS3(tmp_path_factory.mktemp("weed"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dummy credentials in the standard AWS variables (SeaweedFS runs with auth off)."""
    for name, value in DUMMY_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")


async def open_link(server: NatsServer) -> BrokerLink:
    """A broker link on ``server`` (the process's one connection in a node); close with :func:`close_link`."""
    nc, state = await broker.connect(server.url, timeout=10, name="objects-test")
    js = nc.jetstream(timeout=5.0)
    await broker.wait_jetstream(js, timeout=10)
    return BrokerLink(nc=nc, js=js, kind="client", url=server.url, _state=state)


async def close_link(lk: BrokerLink) -> None:
    """Close a link from :func:`open_link` (no embedded child to stop)."""
    lk._state["closing"] = True
    await lk.nc.close()


@pytest.fixture
async def link(nats_server: NatsServer) -> AsyncIterator[BrokerLink]:
    """A broker link on the per-test nats-server."""
    lk = await open_link(nats_server)
    try:
        yield lk
    finally:
        await close_link(lk)


async def _nats_backend(request: pytest.FixtureRequest) -> tuple[Backend, Callable[[], Awaitable[None]]]:
    lk = await open_link(request.getfixturevalue("nats_server"))
    try:
        store = await objects.open_object_store(make_cfg({"type": "nats", "bucket": "files"}), lk)
    except BaseException:
        await close_link(lk)
        raise
    assert isinstance(store, objects.NatsObjectStore)
    js = lk.js

    async def tamper(key: str) -> None:
        meta = await js.get_last_msg(store.stream, store._meta_subject(key))
        subject = store._chunk_subject(json.loads(meta.data or b"{}")["nuid"])
        first = await js.get_msg(store.stream, seq=1, subject=subject, next=True)
        assert first.seq is not None and first.data
        await js.delete_msg(store.stream, first.seq)
        await js.publish(subject, flip(first.data))  # same length, now last

    async def close() -> None:
        await store.close()
        await close_link(lk)

    return Backend("nats", store, tamper, js), close


async def _s3_backend(request: pytest.FixtureRequest) -> tuple[Backend, Callable[[], Awaitable[None]]]:
    server: SeaweedS3 = request.getfixturevalue("seaweed")
    request.getfixturevalue("aws_env")
    bucket = f"files-{uuid.uuid4().hex[:10]}"
    cfg = make_cfg(
        {"type": "s3", "bucket": bucket, "endpoint_url": server.endpoint_url, "region": "us-east-1"}
    )
    store = await objects.open_object_store(cfg, None)
    raw = server.client()

    async def tamper(key: str) -> None:
        head = raw.head_object(Bucket=bucket, Key=key)
        body = raw.get_object(Bucket=bucket, Key=key)["Body"].read()
        raw.put_object(Bucket=bucket, Key=key, Body=flip(body), Metadata=head["Metadata"])

    async def close() -> None:
        await store.close()
        raw.close()

    return Backend("s3", store, tamper, raw), close


@pytest.fixture(params=["nats", "s3"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    """Each object-store backend in turn, against a real server."""
    make = _nats_backend if request.param == "nats" else _s3_backend
    b, close = await make(request)
    try:
        yield b
    finally:
        await close()


def sha_b64(hexdigest: str) -> str:
    """The base64 form of a SHA-256 hex digest (S3's ``ChecksumSHA256``)."""
    return base64.b64encode(bytes.fromhex(hexdigest)).decode()
