"""The donor side of catch-up, and the joiner's transfer (ES-56): every data node donates.

:class:`SnapshotDonor` (every data node) answers

- ``crewlet.estate.snapshot.offer`` (a joiner's request with a reply inbox) with
  ``{"node": <id>, "manifest": {...}}`` when it holds an artefact (silence otherwise);
- ``crewlet.estate.snapshot.fetch.<node_id>`` with ``{"sha256", "offset", "length", "node"}`` →
  the raw bytes ``[offset, offset + length)`` of that artefact (a chunk ≤ 1 MiB, below the broker's
  payload limit); a header ``Crewlet-Error`` says the artefact is gone (rotated) or the request was
  bad. The last chunk logs ``statelog_snapshot_sent`` with the sha256.

The joiner's half of the wire is here too: :func:`ask_offers` (collect every answer for the offer
window), :func:`fetch_artefact` (chunks into a file) and :func:`verify_artefact` (sha256, positions
and schema read out of the file against the manifest). What a joiner does with them is
:class:`shared.estate._catchup.CatchUp`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from pathlib import Path
from typing import Any

from nats.aio.client import Client
from nats.aio.msg import Msg

from shared import logs

from ._manifest import SnapshotFailed, check_copy, file_sha256
from ._snapshot import SnapshotKeeper

__all__ = [
    "CHUNK",
    "FETCH_PREFIX",
    "OFFER_SUBJECT",
    "OFFER_WINDOW",
    "SnapshotDonor",
    "ask_offers",
    "fetch_artefact",
    "verify_artefact",
]

_log = logs.get("statelog")

OFFER_SUBJECT = "crewlet.estate.snapshot.offer"
"""Where a joiner broadcasts its offer request (ES-56)."""
FETCH_PREFIX = "crewlet.estate.snapshot.fetch."
"""``FETCH_PREFIX + <donor node id>``: chunk requests to one donor."""
CHUNK = 1 << 20
"""Largest chunk in bytes (1 MiB, below the broker's 8 MB payload)."""
OFFER_WINDOW = 5.0
"""Seconds a joiner collects offers (ES-56)."""
_ERR = "Crewlet-Error"


def _chunk_limit(nc: Client) -> int:
    return max(4096, min(CHUNK, int(nc.max_payload or CHUNK) - 8192))


class SnapshotDonor:
    """Answers offer requests and chunk fetches from this node's artefact (ES-56).

    Args:
        nc: The node's connection.
        node_id: This node's id.
        keeper: The node's snapshot keeper (its :meth:`~SnapshotKeeper.latest` artefact is offered).
    """

    def __init__(self, nc: Client, *, node_id: str, keeper: SnapshotKeeper) -> None:
        self._nc = nc
        self.node_id = node_id
        self.keeper = keeper
        self._subs: list[Any] = []

    async def start(self) -> None:
        """Subscribe the offer and fetch subjects."""
        self._subs.append(await self._nc.subscribe(OFFER_SUBJECT, cb=self._on_offer))
        self._subs.append(await self._nc.subscribe(FETCH_PREFIX + self.node_id, cb=self._on_fetch))

    async def stop(self) -> None:
        """Unsubscribe (a transfer in flight is answered no more)."""
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        self._subs.clear()

    async def _on_offer(self, msg: Msg) -> None:
        m = self.keeper.latest()
        if m is None or not msg.reply:
            return
        with contextlib.suppress(Exception):
            await msg.respond(json.dumps({"node": self.node_id, "manifest": m}).encode())

    async def _refuse(self, msg: Msg, why: str) -> None:
        with contextlib.suppress(Exception):
            await self._nc.publish(msg.reply, b"", headers={_ERR: why})

    async def _on_fetch(self, msg: Msg) -> None:
        if not msg.reply:
            return
        try:
            req = json.loads(msg.data)
            sha, offset, length = str(req["sha256"]), int(req["offset"]), int(req["length"])
        except (ValueError, KeyError, TypeError):
            await self._refuse(msg, "bad request: needs sha256, offset, length")
            return
        m = self.keeper.latest()
        path = self.keeper.path()
        if m is None or path is None or m["sha256"] != sha:
            await self._refuse(msg, "gone: the artefact was replaced")
            return
        length = max(0, min(length, _chunk_limit(self._nc)))

        def read() -> bytes:
            with path.open("rb") as f:
                f.seek(offset)
                return f.read(length)

        try:
            data = await asyncio.to_thread(read)
        except OSError as e:
            await self._refuse(msg, f"gone: {e}")
            return
        with contextlib.suppress(Exception):
            await msg.respond(data)
        if offset + len(data) >= int(m["bytes"]):
            _log.info(
                "statelog_snapshot_sent", sha256=sha, to=str(req.get("node", "")), bytes=int(m["bytes"])
            )


async def ask_offers(nc: Client, *, node_id: str, window: float = OFFER_WINDOW) -> list[dict[str, Any]]:
    """Broadcast an offer request and collect every answer for ``window`` seconds (ES-56).

    Returns:
        ``[{"node": donor, "manifest": {...}}, ...]`` from other nodes (this node's own answer left out).
    """
    got: list[dict[str, Any]] = []
    inbox = nc.new_inbox()

    async def on(msg: Msg) -> None:
        with contextlib.suppress(ValueError, TypeError):
            offer = json.loads(msg.data)
            if (
                isinstance(offer, dict)
                and offer.get("node") != node_id
                and isinstance(offer.get("manifest"), dict)
            ):
                got.append(offer)

    sub = await nc.subscribe(inbox, cb=on)
    try:
        await nc.publish(OFFER_SUBJECT, json.dumps({"node": node_id}).encode(), reply=inbox)
        await nc.flush()
        await asyncio.sleep(window)
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return got


async def fetch_artefact(
    nc: Client, offer: dict[str, Any], dest: Path, *, node_id: str, timeout: float = 10.0
) -> None:
    """Fetch the offered artefact into ``dest`` in chunks (no verification: see :func:`verify_artefact`).

    Raises:
        SnapshotFailed: the donor went away, refused, or answered short.
    """
    m = offer["manifest"]
    size, sha = int(m["bytes"]), str(m["sha256"])
    subject = FETCH_PREFIX + str(offer["node"])
    step = _chunk_limit(nc)
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        with dest.open("wb") as f:
            offset = 0
            while offset < size:
                req = {"sha256": sha, "offset": offset, "length": min(step, size - offset), "node": node_id}
                try:
                    rep = await nc.request(subject, json.dumps(req).encode(), timeout=timeout)
                except Exception as e:  # noqa: BLE001 - any transport failure: next donor
                    raise SnapshotFailed(f"fetching from {offer['node']}: {type(e).__name__}: {e}") from None
                if rep.headers and rep.headers.get(_ERR):
                    raise SnapshotFailed(f"{offer['node']} refused: {rep.headers[_ERR]}")
                if not rep.data:
                    raise SnapshotFailed(f"{offer['node']} answered an empty chunk at {offset}")
                await asyncio.to_thread(f.write, rep.data)
                offset += len(rep.data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        raise SnapshotFailed(f"writing {dest.name}: {e}") from None


def verify_artefact(path: Path, manifest: dict[str, Any]) -> None:
    """Check a fetched file against its manifest: size, sha256, then positions and schema read out of it.

    Raises:
        SnapshotFailed: naming the first mismatch.
    """
    size = path.stat().st_size
    if size != int(manifest["bytes"]):
        raise SnapshotFailed(f"size {size} is not the manifest's {manifest['bytes']}")
    sha = file_sha256(path)
    if sha != manifest["sha256"]:
        raise SnapshotFailed(f"sha256 mismatch: file {sha}, manifest {manifest['sha256']}")
    positions, schema = check_copy(path)
    for domain, want in (manifest.get("positions") or {}).items():
        have = positions.get(domain, {})
        for key in ("seq", "generation", "applied_through"):
            if int(have.get(key, -1)) != int(want.get(key, -2)):
                raise SnapshotFailed(
                    f"{domain}.{key} in the file is {have.get(key)}, the manifest says {want.get(key)}"
                )
    if schema != manifest.get("migrations"):
        raise SnapshotFailed("the file's schema differs from the manifest's migrations")
