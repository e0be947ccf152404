"""Helpers for the main-job tests: signed GitHub deliveries, company and node files, waiting, and
a look into the node's embedded broker (what was published, and a way to publish)."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml

from tests.support.procs import REPO, SHARED, TOKEN, Node, node_file, write_yaml

__all__ = [
    "GITHUB_ISSUE",
    "SECRET",
    "Broker",
    "company_with_provider",
    "fault_node_file",
    "issue_title",
    "post_github",
    "post_message",
    "sign",
    "turns_of",
    "wait_for",
]

SECRET = "gh-test-secret-6f1c0e3a"
"""The webhook secret the tests sign with (``GITHUB_WEBHOOK_SECRET`` of the node)."""

GITHUB_ISSUE = SHARED / "data" / "github-webhooks" / "issues.opened.json"
"""GitHub's real ``issues.opened`` delivery (octokit/webhooks-examples)."""

T = TypeVar("T")


def issue_title() -> str:
    """The GitHub issue's title in :data:`GITHUB_ISSUE`."""
    return str(json.loads(GITHUB_ISSUE.read_bytes())["issue"]["title"])


def sign(body: bytes, secret: str = SECRET) -> str:
    """``sha256=<hex HMAC-SHA256 of body>``, GitHub's ``X-Hub-Signature-256``."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def post_github(
    node: Node,
    body: bytes | None = None,
    *,
    delivery: str | None = None,
    signature: str | None = "sign",
    source: str = "github",
    event: str = "issues",
    extra: dict[str, str] | None = None,
) -> httpx.Response:
    """POST a GitHub delivery to ``/webhooks/inbound/<source>``, signed unless told otherwise.

    Args:
        node: The node.
        body: The raw body; None for :data:`GITHUB_ISSUE`.
        delivery: ``X-GitHub-Delivery``; None for a fresh UUID.
        signature: ``"sign"`` signs with :data:`SECRET`; None sends no signature header; any
            other string is sent as it is.
        source: The webhook source.
        event: ``X-GitHub-Event``.
        extra: More headers.
    """
    raw = GITHUB_ISSUE.read_bytes() if body is None else body
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        **(extra or {}),
    }
    if signature is not None:
        headers["X-Hub-Signature-256"] = sign(raw) if signature == "sign" else signature
    return httpx.post(f"{node.url}/webhooks/inbound/{source}", content=raw, headers=headers, timeout=30)


def post_message(node: Node, seat: str, text: str, **fields: Any) -> httpx.Response:
    """``POST /seats/<seat>/messages`` with the test token."""
    return httpx.post(
        f"{node.url}/seats/{seat}/messages",
        json={"text": text, **fields},
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=30,
    )


def turns_of(node: Node, **filters: str) -> list[dict[str, Any]]:
    """``GET /turns`` rows (newest first), filtered as the route allows."""
    r = node.get("/turns?" + "&".join(f"{k}={v}" for k, v in {"limit": "500", **filters}.items()))
    assert r.status_code == 200, r.text
    rows: list[dict[str, Any]] = r.json()["turns"]
    return rows


def wait_for(
    what: str, probe: Callable[[], T | None], *, timeout: float = 30.0, node: Node | None = None
) -> T:
    """Poll ``probe`` every 50 ms until it returns something truthy; return that.

    Raises:
        AssertionError: ``timeout`` passed (with ``what`` and the tail of ``node``'s log).
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        if node is not None and node.popen.poll() is not None:
            raise AssertionError(f"{what}: node exited {node.popen.returncode}:\n{node.output()[-4000:]}")
        last = probe()
        if last:
            return last
        time.sleep(0.05)
    tail = node.output()[-4000:] if node is not None else ""
    raise AssertionError(f"{what}: not within {timeout} s (last: {last!r})\n{tail}")


def company_with_provider(path: Path, entry: dict[str, Any], **changes: Any) -> Path:
    """Write the example company with ``providers.llm.default`` replaced by ``entry``.

    The other example entries (``claude``, ``local``) stay; their keys are unset, so the node
    logs them ``provider_unconfigured`` and no chain uses them. ``changes`` replace top-level keys.
    """
    data = yaml.safe_load((REPO / "examples" / "company.yaml").read_text())
    data["providers"]["llm"]["default"] = entry
    data.update(changes)
    return write_yaml(path, data)


def fault_node_file(dir: Path, *, node_id: str, port: int, **sections: Any) -> Path:
    """A node file with a 3 s lease TTL and a 5 s mailbox ack window, so fault tests end by themselves."""
    return node_file(
        dir,
        node_id=node_id,
        port=port,
        coordination={"lease_ttl_seconds": 3.0},
        stream={"ack_wait_seconds": 5.0},
        **sections,
    )


class Broker:
    """The node's embedded nats-server, found through its ports file under ``<store>/broker``.

    Only for looking (stream counters, KV entries) and for publishing a test message; the node's
    own state is what the assertions are about.
    """

    def __init__(self, store_dir: Path) -> None:
        self.store_dir = store_dir

    @property
    def url(self) -> str:
        """``nats://127.0.0.1:<port>`` of the running child (the newest ports file)."""
        files = sorted((self.store_dir / "broker").glob("*.ports"), key=lambda p: p.stat().st_mtime)
        assert files, f"no ports file under {self.store_dir / 'broker'}"
        return str(json.loads(files[-1].read_text())["nats"][0])

    def _run(self, fn: Callable[[Any], Any]) -> Any:
        import nats

        async def go() -> Any:
            nc = await nats.connect(self.url, connect_timeout=5, max_reconnect_attempts=0)
            try:
                return await fn(nc)
            finally:
                await nc.close()

        return asyncio.run(go())

    def last_seq(self, stream: str = "CREWLET_AGENT") -> int:
        """The stream's last sequence: how many messages were ever published to it."""

        async def go(nc: Any) -> int:
            info = await nc.jetstream().stream_info(stream)
            return int(info.state.last_seq)

        return int(self._run(go))

    def kv_purge(self, bucket_suffix: str) -> int:
        """Purge every key of the bucket whose name ends with ``bucket_suffix``; how many there were.

        What a store that cannot be asked looks like to a dedupe claim (FL-33: it fails open), and
        what an operator's release does (FL-122: a purge, so the key can be claimed again).
        """

        async def go(nc: Any) -> int:
            js = nc.jetstream()
            names = [n async for n in _stream_names(js)]
            bucket = next(n[3:] for n in names if n.startswith("KV_") and n.endswith(bucket_suffix))
            kv = await js.key_value(bucket)
            try:
                keys = list(await kv.keys())
            except Exception as e:  # noqa: BLE001 - nats-py raises NoKeysError for an empty bucket
                if type(e).__name__ == "NoKeysError":
                    return 0
                raise
            for key in keys:
                await kv.purge(key)
            return len(keys)

        return int(self._run(go))

    def kv_keys(self, bucket_suffix: str) -> list[str]:
        """Keys of the coordination bucket whose name ends with ``bucket_suffix`` (e.g. ``claims``)."""

        async def go(nc: Any) -> list[str]:
            js = nc.jetstream()
            names = [n async for n in _stream_names(js)]
            bucket = next(n[3:] for n in names if n.startswith("KV_") and n.endswith(bucket_suffix))
            kv = await js.key_value(bucket)
            try:
                return list(await kv.keys())
            except Exception as e:  # noqa: BLE001 - nats-py raises NoKeysError for an empty bucket
                if type(e).__name__ == "NoKeysError":
                    return []
                raise

        return list(self._run(go))

    def inbox(self, seat: str) -> dict[str, int]:
        """The seat's mailbox counters: ``pending`` (never delivered), ``ack_pending`` (delivered,
        not acked: in a holder's hands or waiting out a NAK delay), ``redelivered``, ``delivered``."""
        from shared.bus import durable_name, inbox_group, inbox_subject

        async def go(nc: Any) -> dict[str, int]:
            info = await nc.jetstream().consumer_info(
                "CREWLET_AGENT", durable_name(inbox_group(seat), inbox_subject(seat))
            )
            return {
                "pending": int(info.num_pending),
                "ack_pending": int(info.num_ack_pending),
                "redelivered": int(info.num_redelivered),
                "delivered": int(info.delivered.consumer_seq),
            }

        return dict(self._run(go))

    def publish(self, subject: str, data: bytes, headers: dict[str, str]) -> int:
        """Publish one message to a stream subject; return its stream sequence."""

        async def go(nc: Any) -> int:
            ack = await nc.jetstream().publish(subject, data, headers=headers)
            return int(ack.seq)

        return int(self._run(go))


async def _stream_names(js: Any) -> Any:
    for info in await js.streams_info():
        yield info.config.name
