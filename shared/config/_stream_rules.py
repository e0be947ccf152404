"""The Tier A refusals and warnings about the node file's ``stream`` block (FL-3, FL-4, FL-22..FL-30).

:func:`stream_shape` reads the resolved raw block defensively (what kind of broker this node has,
its cluster and leaf blocks); :func:`check_stream` applies the rules listed under those
requirements in :mod:`shared.config._node_rules` and returns the member count the coordination
rule needs. :func:`count_peers` is public: ``crewlet`` counts a cluster's members with it too.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ._issues import Findings, Issue

__all__ = ["MAX_REPLICAS", "StreamShape", "check_stream", "count_peers", "stream_shape"]

_DURATION = re.compile(r"^\d+(ms|s|m|h)$")
MAX_REPLICAS = 5
"""JetStream's replica ceiling (FL-24)."""

_LEAF_SCHEMES = ("nats-leaf", "nats", "tls", "ws", "wss")
"""URL schemes nats-server accepts for a leaf remote."""


@dataclass(frozen=True)
class StreamShape:
    """The raw ``stream`` block as the rules read it (well-shaped parts only).

    Attributes:
        stream: The block; {} when it is absent or not a mapping.
        stype: ``stream.type`` as written (``embedded`` when absent).
        leaf: ``stream.leaf`` when it is a mapping, else None.
        leaf_urls: ``stream.leaf.urls`` as written; [] when absent.
        cluster: ``stream.cluster`` when it is a mapping, else None.
        kind: ``client`` (``nats``), ``leaf`` (leaf remotes) or ``member`` (FL-21).
        clustered: An embedded member that names a cluster, lists peers or opens a leaf port.
    """

    stream: dict[str, Any]
    stype: Any
    leaf: dict[str, Any] | None
    leaf_urls: Any
    cluster: dict[str, Any] | None
    kind: str
    clustered: bool


def stream_shape(raw: dict[str, Any]) -> StreamShape:
    """Read the ``stream`` block of the resolved raw document ``raw``."""
    stream = raw.get("stream") if isinstance(raw.get("stream"), dict) else {}
    assert isinstance(stream, dict)
    stype = stream.get("type", "embedded")
    leaf = stream.get("leaf") if isinstance(stream.get("leaf"), dict) else None
    leaf_urls = (leaf or {}).get("urls") or []
    cluster = stream.get("cluster") if isinstance(stream.get("cluster"), dict) else None
    kind = "client" if stype == "nats" else ("leaf" if leaf_urls else "member")
    clustered = stype == "embedded" and bool(
        (cluster and (cluster.get("name") or cluster.get("peers"))) or (leaf and leaf.get("port"))
    )
    return StreamShape(stream, stype, leaf, leaf_urls, cluster, kind, clustered)


def _host_key(host: str) -> str:
    host = host.strip("[]").lower()
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host


def count_peers(cluster: dict[str, Any], *, file: str = "") -> tuple[int, list[Issue]]:
    """Count the other members named by ``stream.cluster.peers`` (FL-23).

    An entry recognisably this node's own route (same host and port as ``cluster.host`` with
    ``cluster.port``, or as ``cluster.advertise`` whose bare host keeps ``cluster.port``; scheme
    ignored, host case-insensitive, IPs canonical) is not counted, and a repeated entry counts
    once; each discounted entry is a warning. An entry without a host and a port is an error.

    Args:
        cluster: The raw ``stream.cluster`` mapping.
        file: The file name for the issues.

    Returns:
        ``(other_members, issues)``.
    """
    issues: list[Issue] = []
    peers = cluster.get("peers") or []
    if not isinstance(peers, list):
        return 0, issues
    port = cluster.get("port", 6222)
    own: set[tuple[str, int]] = set()
    host = cluster.get("host") or ""
    if isinstance(host, str) and host and host not in ("0.0.0.0", "::") and isinstance(port, int):
        own.add((_host_key(host), port))
    adv = cluster.get("advertise") or ""
    if isinstance(adv, str) and adv:
        a = urlsplit(adv if "://" in adv else f"nats://{adv}")
        try:
            a_port = a.port or port
        except ValueError:
            a_port = port
        if a.hostname and isinstance(a_port, int):
            own.add((_host_key(a.hostname), a_port))
    seen: set[tuple[str, int]] = set()
    counted = 0
    for i, entry in enumerate(peers):
        path = f"stream.cluster.peers[{i}]"
        if not isinstance(entry, str):
            issues.append(Issue(file, path, "shape", "a peer is a route URL string like nats://node-b:6222"))
            continue
        u = urlsplit(entry if "://" in entry else f"nats://{entry}")
        try:
            p = u.port
        except ValueError:
            p = None
        if not u.hostname or p is None:
            issues.append(
                Issue(
                    file,
                    path,
                    "invalid",
                    f"{entry!r} is not a route URL with a host and a port (e.g. nats://node-b:6222); "
                    "the server could never dial it",
                )
            )
            continue
        k = (_host_key(u.hostname), p)
        if k in own:
            issues.append(
                Issue(file, path, "conflict", f"{entry!r} is this node's own route; not counted", "warning")
            )
            continue
        if k in seen:
            issues.append(
                Issue(file, path, "conflict", f"{entry!r} repeats an earlier entry; counted once", "warning")
            )
            continue
        seen.add(k)
        counted += 1
    return counted, issues


def check_stream(shape: StreamShape, f: Findings, *, check_files: bool) -> int:
    """Apply the ``stream`` rules (FL-3, FL-4, FL-22..FL-30) to ``shape``, adding to ``f``.

    Args:
        shape: The block, from :func:`stream_shape`.
        f: Collects the issues.
        check_files: Whether TLS and creds files must exist.

    Returns:
        The broker members the cluster block names, this node included (1 without one).
    """
    members = _check_cluster(shape, f)
    _check_replicas(shape, f, members)
    _check_storage_and_leaf(shape, f)
    _check_external(shape, f, check_files=check_files)
    _check_sync(shape, f)
    return members


def _check_cluster(shape: StreamShape, f: Findings) -> int:
    """FL-22..FL-27: the cluster block; returns the member count."""
    stype, cluster = shape.stype, shape.cluster
    members = 1
    if cluster is not None:
        if stype == "nats":
            f.err(
                "stream.cluster",
                "conflict",
                "stream.cluster configures an embedded server's membership and is not read with stream.type: "
                "nats; remove it, or use stream.type: embedded",
            )
        else:
            if not cluster.get("name"):
                f.err(
                    "stream.cluster.name",
                    "missing",
                    "a cluster block needs a name every member shares (without one the server starts solo)",
                )
            if not cluster.get("host"):
                f.warn(
                    "stream.cluster.host",
                    "invalid",
                    "unset: the route listener binds every interface, an unauthenticated way into every stream; "
                    "set it to this node's cluster address",
                )
            others, peer_issues = count_peers(cluster, file=f.file)
            f.extend(peer_issues)
            peers = cluster.get("peers") or []
            if (
                isinstance(peers, list)
                and peers
                and others == 0
                and not any(i.severity == "error" for i in peer_issues)
            ):
                f.err(
                    "stream.cluster.peers",
                    "invalid",
                    "the list names only this node; list the other members' route URLs, or leave it empty on "
                    "a member that seeds the cluster",
                )
            members = 1 + others
            if members == 2:
                f.err(
                    "stream.cluster.peers",
                    "out_of_range",
                    "two members have no quorum without each other, so every restart is an outage: run one "
                    "member or three (list two other peers)",
                )
            if others > 4:
                f.warn(
                    "stream.cluster.peers",
                    "out_of_range",
                    f"{others} other members: no stream keeps more than five copies; grow a fleet beyond five "
                    "members with leaves",
                )
    return members


def _check_replicas(shape: StreamShape, f: Findings, members: int) -> None:
    """FL-24, FL-25: replicas against JetStream's ceiling and the member count."""
    stream, stype, kind = shape.stream, shape.stype, shape.kind
    replicas = stream.get("replicas", 1)
    if isinstance(replicas, int) and not isinstance(replicas, bool):
        if replicas > MAX_REPLICAS:
            f.err(
                "stream.replicas",
                "out_of_range",
                f"{replicas} is above JetStream's ceiling of {MAX_REPLICAS}",
            )
        elif stype == "embedded" and kind == "member" and replicas > 1 and members == 1:
            f.err(
                "stream.replicas",
                "conflict",
                f"{replicas} replicas with no peers: there is nothing to replicate to; set replicas: 1, or "
                "list the other members in stream.cluster.peers",
            )
        elif stype == "embedded" and kind == "member" and replicas > members:
            f.err(
                "stream.replicas",
                "out_of_range",
                f"{replicas} replicas but only {members} members; set replicas to at most {members}",
            )


def _check_storage_and_leaf(shape: StreamShape, f: Findings) -> None:
    """FL-26 (``store_dir`` where nothing is stored) and FL-4 (leaf remotes and the leaf port)."""
    stream, stype, leaf, leaf_urls, cluster = (
        shape.stream,
        shape.stype,
        shape.leaf,
        shape.leaf_urls,
        shape.cluster,
    )
    if stream.get("store_dir"):
        if stype == "nats":
            f.err(
                "stream.store_dir",
                "conflict",
                "an external cluster keeps its own storage; remove stream.store_dir",
            )
        elif leaf_urls:
            f.err(
                "stream.store_dir",
                "conflict",
                "a leaf broker runs without JetStream and stores nothing; remove stream.store_dir",
            )

    # FL-4: leaf remotes are nats-leaf:// (or ws/tls) URLs with a host and port, each named once;
    # nats-server would only say "exited with code 1" at start
    seen_urls: set[str] = set()
    for i, url in enumerate(leaf_urls if isinstance(leaf_urls, list) else []):
        path = f"stream.leaf.urls[{i}]"
        parsed = urlsplit(str(url)) if isinstance(url, str) else None
        try:
            port = parsed.port if parsed is not None else None
        except ValueError:
            port = None
        if parsed is None or parsed.scheme not in _LEAF_SCHEMES or not parsed.hostname or port is None:
            f.err(
                path,
                "invalid",
                f"{url!r} is not a leaf remote: write nats-leaf://HOST:PORT with a member's stream.leaf.port",
            )
        elif str(url) in seen_urls:
            f.err(path, "conflict", f"{url!r} is listed twice")
        seen_urls.add(str(url))
    if leaf_urls and leaf and leaf.get("port"):
        f.err(
            "stream.leaf.port",
            "conflict",
            "a leaf (stream.leaf.urls) opens no leaf listener of its own; remove stream.leaf.port",
        )
    if leaf and cluster and leaf.get("port") and leaf.get("port") == cluster.get("port", 6222):
        f.err(
            "stream.leaf.port",
            "conflict",
            f"{leaf.get('port')} is also stream.cluster.port: give the leaf listener its own port",
        )


def _check_external(shape: StreamShape, f: Findings, *, check_files: bool) -> None:
    """FL-3, FL-4: external-cluster keys against embedded ones, TLS pairs, readable files."""
    stream, stype, leaf = shape.stream, shape.stype, shape.leaf
    # FL-3, FL-4 external vs embedded keys
    if stype == "nats":
        if not stream.get("url"):
            f.err("stream.url", "missing", "stream.type: nats needs stream.url (e.g. nats://nats-1:4222)")
        if leaf:
            f.err(
                "stream.leaf",
                "conflict",
                "stream.leaf is for embedded brokers; remove it with stream.type: nats",
            )
        if stream.get("debug"):
            f.err(
                "stream.debug",
                "conflict",
                "stream.debug is for an embedded broker; remove it with stream.type: nats",
            )
    else:
        for key in ("url", "credentials", "token", "tls"):
            if stream.get(key):
                f.err(
                    f"stream.{key}",
                    "conflict",
                    f"stream.{key} is only read with stream.type: nats; remove it, or set stream.type: nats",
                )
    tls = stream.get("tls") if isinstance(stream.get("tls"), dict) else None
    if tls:
        if bool(tls.get("cert")) != bool(tls.get("key")):
            missing = "key" if tls.get("cert") else "cert"
            f.err(
                f"stream.tls.{missing}",
                "missing",
                "stream.tls.cert and stream.tls.key go together: set both or neither",
            )
    if check_files and stype == "nats":
        files = [(f"stream.tls.{k}", (tls or {}).get(k)) for k in ("ca", "cert", "key")]
        files.append(("stream.credentials", stream.get("credentials")))
        for path, value in files:
            if isinstance(value, str) and value and not Path(value).is_file():
                f.err(path, "invalid", f"{value}: no such file or directory")


def _check_sync(shape: StreamShape, f: Findings) -> None:
    """FL-30: ``stream.sync`` is ``always`` or a duration, and a duration only where it is safe."""
    stream, stype = shape.stream, shape.stype
    replicas = stream.get("replicas", 1)
    # FL-30 sync
    sync = stream.get("sync", "always")
    if isinstance(sync, str) and sync != "always":
        if not _DURATION.match(sync):
            f.err("stream.sync", "invalid", f"{sync!r}: use 'always' or a duration like 30s")
        elif stype == "nats":
            f.err(
                "stream.sync",
                "conflict",
                "a sync window is the embedded broker's; the external cluster sets its own",
            )
        elif isinstance(replicas, int) and replicas < 3:
            f.err(
                "stream.sync",
                "conflict",
                f"a sync window below three replicas can lose acknowledged writes; use 'always' (replicas: {replicas})",
            )
