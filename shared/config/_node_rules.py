"""The Tier A refusals and warnings of spec/fleet.md §22 (FL-158) that concern the node file.

Every rule reads the *resolved raw* document defensively, so the rules still run on the parts
that are well-shaped when other parts have shape errors: one run reports every mistake. Each
refusal names the field and the way out.

Rules implemented here (requirement in brackets):

- node id grammar; a clustered embedded member with only the default id [FL-9]
- label key grammar: 1–63 bytes of UTF-8, no whitespace or unprintable character [FL-13]
- ``data`` on a leaf; a broker member without ``data``; ``ingress``/``workers`` without ``data``;
  a node without ``data`` that is not ``store.scratch``; a ``data`` node on a scratch store [FL-17]
- a two-member embedded cluster; a peer list naming only this node; an undialable peer entry;
  warnings for discounted own/duplicate entries and for more than four other peers [FL-22..FL-24]
- ``stream.replicas`` above 5; above 1 on an embedded stream with no peers; above the member
  count [FL-24, FL-25]
- ``stream.store_dir`` beside ``stream.leaf.urls`` or ``stream.type: nats`` [FL-26]
- a cluster block without a name; ``stream.cluster`` with ``nats``; warn: unset ``cluster.host``
  [FL-27]
- ``stream.sync`` as a duration with ``nats`` or below three replicas [FL-30]
- ``coordination.type: local`` beside a clustered or external stream [FL-38]
- TLS cert without key or key without cert; a TLS/creds file that cannot be read; TLS, creds,
  token or url beside ``embedded``; ``stream.url`` missing with ``nats`` [FL-3]
- ``stream.debug`` with ``nats`` [FL-4]
- ``coordination.lease_ttl_seconds`` below the broker's 100 ms floor [FL-34]
- ``api.port`` above 0 with no token; a token shorter than 26 characters; duplicate token ids
  [CO-27, company.md §7]
- the keyring: a key id outside the grammar; material that is not base64 of exactly 32 bytes;
  duplicate key ids; ``active_key_id`` naming no listed key; several keys with no
  ``active_key_id``; ``active_key_id`` with no keys [CO-40, FL-151]

Rules that need a live broker (existing objects below ``replicas``, ``max_payload``, a route
port in use, a different object store recorded) are checked at boot by the broker and
coordination seams.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ._issues import Issue
from ._node import ALL_ROLES, NODE_ID_RE, NodeConfig
from ._retention import MIN_AGE_RANGE, SNAPSHOTS_KEPT, TEST_TIMINGS_ENV, test_timings

__all__ = ["check_node", "count_peers"]

_NODE_ID = re.compile(NODE_ID_RE)
_DURATION = re.compile(r"^\d+(ms|s|m|h)$")
MIN_TOKEN_CHARS = 26
"""A bearer token shorter than this is refused (CO-27)."""
MAX_REPLICAS = 5
"""JetStream's replica ceiling (FL-24)."""
MIN_BUCKET_AGE_SECONDS = 0.1
"""The broker's floor for any bucket age or TTL (FL-34)."""
KEY_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
"""Keyring key id grammar (CO-40): it is written into every envelope, so never ``:``."""
KEY_BYTES = 32
"""An AES-256 key's length in bytes (CO-40: material is base64 of 32 bytes)."""


_LEAF_SCHEMES = ("nats-leaf", "nats", "tls", "ws", "wss")
"""URL schemes nats-server accepts for a leaf remote."""


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict):
            return None
        data = data.get(key)
    return data


def _label_key_problem(key: Any) -> str | None:
    if not isinstance(key, str):
        return "label keys must be strings"
    n = len(key.encode("utf-8"))
    if n < 1 or n > 63:
        return f"label key {key!r} is {n} bytes; keys are 1 to 63 bytes of UTF-8"
    if any(ch.isspace() for ch in key):
        return f"label key {key!r} contains whitespace"
    if not key.isprintable():
        return f"label key {key!r} contains an unprintable character"
    return None


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


def check_node(raw: dict[str, Any], cfg: NodeConfig | None, *, file: str, check_files: bool) -> list[Issue]:
    """Apply every Tier A rule listed in the module docstring.

    Args:
        raw: The resolved document (``${VAR}`` substituted, id and role overrides applied).
        cfg: The shape-validated config, or None when shape validation failed.
        file: The file name for the issues.
        check_files: Whether TLS and creds files must exist.

    Returns:
        Every error and warning found, unsorted.
    """
    out: list[Issue] = []

    def err(path: str, kind: Any, msg: str) -> None:
        out.append(Issue(file, path, kind, msg))

    def warn(path: str, kind: Any, msg: str) -> None:
        out.append(Issue(file, path, kind, msg, "warning"))

    stream = _get(raw, "stream") if isinstance(_get(raw, "stream"), dict) else {}
    stype = stream.get("type", "embedded")
    leaf = stream.get("leaf") if isinstance(stream.get("leaf"), dict) else None
    leaf_urls = (leaf or {}).get("urls") or []
    cluster = stream.get("cluster") if isinstance(stream.get("cluster"), dict) else None
    kind = "client" if stype == "nats" else ("leaf" if leaf_urls else "member")

    # FL-9 node id
    node_id = _get(raw, "node", "id")
    if isinstance(node_id, str) and not _NODE_ID.match(node_id):
        err(
            "node.id",
            "invalid",
            f"{node_id!r} is not a node id: start with a letter or digit, then letters, digits, '.', '_' "
            "or '-', at most 64 characters",
        )
    clustered = stype == "embedded" and bool(
        (cluster and (cluster.get("name") or cluster.get("peers"))) or (leaf and leaf.get("port"))
    )
    if clustered and cfg is not None and cfg.id_from_default:
        err(
            "node.id",
            "missing",
            "a clustered embedded member needs its own stable id (it is the NATS server name): set node.id "
            "or CREWLET_NODE_ID; node-0 is never assumed when clustering",
        )

    # FL-13 labels
    labels = _get(raw, "node", "labels")
    if isinstance(labels, dict):
        for key in labels:
            problem = _label_key_problem(key)
            if problem:
                err(f"node.labels.{key}", "invalid", problem)

    # FL-17 role pairings
    roles_raw = _get(raw, "node", "roles")
    roles = {r for r in roles_raw if isinstance(r, str)} if isinstance(roles_raw, list) else set(ALL_ROLES)
    roles &= set(ALL_ROLES)
    has_data = "data" in roles
    if has_data and kind == "leaf":
        err(
            "node.roles",
            "conflict",
            "a data node cannot sit on a leaf broker (stream.leaf.urls): remove stream.leaf.urls to make it a "
            "broker member, or remove data from node.roles to run it as a stateless satellite",
        )
    if not has_data and kind == "member":
        err(
            "node.roles",
            "conflict",
            "a broker member without data would hold the fleet's streams with no estate copy: add data to "
            "node.roles, or set stream.leaf.urls (or stream.type: nats) so this node joins as a leaf or client",
        )
    for role in ("ingress", "workers"):
        if role in roles and not has_data:
            err(
                "node.roles",
                "conflict",
                f"{role} reads this node's own estate copy and needs data on the same node: add data to "
                f"node.roles, or run {role} on a data node",
            )
    scratch = _get(raw, "store", "scratch")
    if not has_data and scratch is not True:
        err(
            "store.scratch",
            "missing",
            "a node without data keeps no estate: set store.scratch: true (its store is wiped at every boot), "
            "or add data to node.roles",
        )
    if has_data and scratch is True:
        err(
            "store.scratch",
            "conflict",
            "a data node keeps the estate on its disk; scratch (wiped at every boot) is only for nodes "
            "without data: remove store.scratch or remove data from node.roles",
        )

    # FL-22..FL-27 cluster and replicas
    members = 1
    if cluster is not None:
        if stype == "nats":
            err(
                "stream.cluster",
                "conflict",
                "stream.cluster configures an embedded server's membership and is not read with stream.type: "
                "nats; remove it, or use stream.type: embedded",
            )
        else:
            if not cluster.get("name"):
                err(
                    "stream.cluster.name",
                    "missing",
                    "a cluster block needs a name every member shares (without one the server starts solo)",
                )
            if not cluster.get("host"):
                warn(
                    "stream.cluster.host",
                    "invalid",
                    "unset: the route listener binds every interface, an unauthenticated way into every stream; "
                    "set it to this node's cluster address",
                )
            others, peer_issues = count_peers(cluster, file=file)
            out.extend(peer_issues)
            peers = cluster.get("peers") or []
            if (
                isinstance(peers, list)
                and peers
                and others == 0
                and not any(i.severity == "error" for i in peer_issues)
            ):
                err(
                    "stream.cluster.peers",
                    "invalid",
                    "the list names only this node; list the other members' route URLs, or leave it empty on "
                    "a member that seeds the cluster",
                )
            members = 1 + others
            if members == 2:
                err(
                    "stream.cluster.peers",
                    "out_of_range",
                    "two members have no quorum without each other, so every restart is an outage: run one "
                    "member or three (list two other peers)",
                )
            if others > 4:
                warn(
                    "stream.cluster.peers",
                    "out_of_range",
                    f"{others} other members: no stream keeps more than five copies; grow a fleet beyond five "
                    "members with leaves",
                )
    replicas = stream.get("replicas", 1)
    if isinstance(replicas, int) and not isinstance(replicas, bool):
        if replicas > MAX_REPLICAS:
            err(
                "stream.replicas",
                "out_of_range",
                f"{replicas} is above JetStream's ceiling of {MAX_REPLICAS}",
            )
        elif stype == "embedded" and kind == "member" and replicas > 1 and members == 1:
            err(
                "stream.replicas",
                "conflict",
                f"{replicas} replicas with no peers: there is nothing to replicate to; set replicas: 1, or "
                "list the other members in stream.cluster.peers",
            )
        elif stype == "embedded" and kind == "member" and replicas > members:
            err(
                "stream.replicas",
                "out_of_range",
                f"{replicas} replicas but only {members} members; set replicas to at most {members}",
            )

    if stream.get("store_dir"):
        if stype == "nats":
            err(
                "stream.store_dir",
                "conflict",
                "an external cluster keeps its own storage; remove stream.store_dir",
            )
        elif leaf_urls:
            err(
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
            err(
                path,
                "invalid",
                f"{url!r} is not a leaf remote: write nats-leaf://HOST:PORT with a member's stream.leaf.port",
            )
        elif str(url) in seen_urls:
            err(path, "conflict", f"{url!r} is listed twice")
        seen_urls.add(str(url))
    if leaf_urls and leaf and leaf.get("port"):
        err(
            "stream.leaf.port",
            "conflict",
            "a leaf (stream.leaf.urls) opens no leaf listener of its own; remove stream.leaf.port",
        )
    if leaf and cluster and leaf.get("port") and leaf.get("port") == cluster.get("port", 6222):
        err(
            "stream.leaf.port",
            "conflict",
            f"{leaf.get('port')} is also stream.cluster.port: give the leaf listener its own port",
        )

    # FL-3, FL-4 external vs embedded keys
    if stype == "nats":
        if not stream.get("url"):
            err("stream.url", "missing", "stream.type: nats needs stream.url (e.g. nats://nats-1:4222)")
        if leaf:
            err(
                "stream.leaf",
                "conflict",
                "stream.leaf is for embedded brokers; remove it with stream.type: nats",
            )
        if stream.get("debug"):
            err(
                "stream.debug",
                "conflict",
                "stream.debug is for an embedded broker; remove it with stream.type: nats",
            )
    else:
        for key in ("url", "credentials", "token", "tls"):
            if stream.get(key):
                err(
                    f"stream.{key}",
                    "conflict",
                    f"stream.{key} is only read with stream.type: nats; remove it, or set stream.type: nats",
                )
    tls = stream.get("tls") if isinstance(stream.get("tls"), dict) else None
    if tls:
        if bool(tls.get("cert")) != bool(tls.get("key")):
            missing = "key" if tls.get("cert") else "cert"
            err(
                f"stream.tls.{missing}",
                "missing",
                "stream.tls.cert and stream.tls.key go together: set both or neither",
            )
    if check_files and stype == "nats":
        files = [(f"stream.tls.{k}", (tls or {}).get(k)) for k in ("ca", "cert", "key")]
        files.append(("stream.credentials", stream.get("credentials")))
        for path, value in files:
            if isinstance(value, str) and value and not Path(value).is_file():
                err(path, "invalid", f"{value}: no such file or directory")

    # FL-30 sync
    sync = stream.get("sync", "always")
    if isinstance(sync, str) and sync != "always":
        if not _DURATION.match(sync):
            err("stream.sync", "invalid", f"{sync!r}: use 'always' or a duration like 30s")
        elif stype == "nats":
            err(
                "stream.sync",
                "conflict",
                "a sync window is the embedded broker's; the external cluster sets its own",
            )
        elif isinstance(replicas, int) and replicas < 3:
            err(
                "stream.sync",
                "conflict",
                f"a sync window below three replicas can lose acknowledged writes; use 'always' (replicas: {replicas})",
            )

    # FL-38 coordination
    ctype = _get(raw, "coordination", "type")
    if ctype == "local" and (stype == "nats" or clustered or members > 1):
        err(
            "coordination.type",
            "conflict",
            "local leases live in this process only, so every node would believe it owns the whole company: use "
            "coordination.type: embedded-kv with a clustered or external stream",
        )
    ttl = _get(raw, "coordination", "lease_ttl_seconds")
    if isinstance(ttl, int | float) and not isinstance(ttl, bool) and ttl < MIN_BUCKET_AGE_SECONDS:
        err(
            "coordination.lease_ttl_seconds",
            "out_of_range",
            f"{ttl} s is below the broker's 100 ms floor for a bucket age (FL-34)",
        )

    # CO-27 tokens
    port = _get(raw, "api", "port")
    port = 8080 if port is None else port
    tokens = _get(raw, "api", "auth", "tokens") or []
    if isinstance(port, int) and port > 0 and isinstance(tokens, list) and not tokens:
        err(
            "api.auth.tokens",
            "missing",
            'api.port > 0 needs at least one token (e.g. token: "${CREWLET_API_TOKEN}"), or set api.port: 0',
        )
    ids: set[str] = set()
    if isinstance(tokens, list):
        for i, tok in enumerate(tokens):
            if not isinstance(tok, dict):
                continue
            value = tok.get("token")
            if isinstance(value, str) and "${" not in value and len(value) < MIN_TOKEN_CHARS:
                err(
                    f"api.auth.tokens[{i}].token",
                    "out_of_range",
                    f"a token must be at least {MIN_TOKEN_CHARS} characters (got {len(value)})",
                )
            tid = tok.get("id")
            if isinstance(tid, str):
                if tid in ids:
                    err(f"api.auth.tokens[{i}].id", "conflict", f"token id {tid!r} is used twice")
                ids.add(tid)

    out.extend(_check_keyring(_get(raw, "secrets"), file))
    if cfg is not None:
        out.extend(_check_retention(raw, cfg, file, has_data="data" in roles))
    return out


def _days(seconds: float) -> str:
    return f"{seconds / 86400:g}d" if seconds >= 86400 else f"{seconds / 3600:g}h"


def _check_retention(raw: dict[str, Any], cfg: NodeConfig, file: str, *, has_data: bool) -> list[Issue]:
    """ES-2, ES-49, ES-52 on the shape-valid config (durations already in seconds)."""
    out: list[Issue] = []
    if not has_data and _get(raw, "store", "snapshot_dir"):
        out.append(
            Issue(
                file,
                "store.snapshot_dir",
                "conflict",
                "a node without data holds no estate and takes no snapshots: remove store.snapshot_dir, "
                "or add data to node.roles",
            )
        )
    tr = cfg.stream.tracker_retention
    lo, hi = MIN_AGE_RANGE
    if not test_timings() and not lo <= tr.min_age <= hi:
        out.append(
            Issue(
                file,
                "stream.tracker_retention.min_age",
                "out_of_range",
                f"min_age {_days(tr.min_age)} is outside 24h..90d (ES-52); {TEST_TIMINGS_ENV}=1 allows "
                "short ages for tests only",
            )
        )
    if tr.snapshot_interval * (SNAPSHOTS_KEPT + 1) >= tr.min_age:
        out.append(
            Issue(
                file,
                "stream.tracker_retention.snapshot_interval",
                "conflict",
                f"snapshot_interval {_days(tr.snapshot_interval)} × {SNAPSHOTS_KEPT + 1} must stay below "
                f"stream.tracker_retention.min_age {_days(tr.min_age)}: a node's artefact could otherwise be "
                "older than every record the trim keeps (ES-52)",
            )
        )
    fleet = cfg.stream.type == "nats" or cfg.stream.replicas > 1
    if fleet and has_data and cfg.retention.backup_floor == "engine" and not cfg.retention.backup_owner:
        out.append(
            Issue(
                file,
                "retention.backup_owner",
                "missing",
                "nobody is named for the backups that gate the trim (ES-49): set retention.backup_owner",
                "warning",
            )
        )
    return out


def _material_problem(material: str) -> str | None:
    """Why ``material`` is not base64 of exactly :data:`KEY_BYTES` bytes, or None. Never echoes it."""
    if not material:
        return "is empty: give base64 of 32 random bytes (`crewlet secrets keygen` prints one)"
    try:
        raw = base64.b64decode(material.strip(), validate=True)
    except (binascii.Error, ValueError):
        return (
            "is not valid base64 (the value is not shown): give base64 of 32 random bytes "
            "(`crewlet secrets keygen` prints one)"
        )
    if len(raw) != KEY_BYTES:
        return (
            f"decodes to {len(raw)} bytes; an AES-256 key is exactly {KEY_BYTES} bytes "
            "(`crewlet secrets keygen` prints one)"
        )
    return None


def _check_keyring(secrets: Any, file: str) -> list[Issue]:
    """The keyring refusals (CO-40, FL-151); each names its path, never a key's material."""
    out: list[Issue] = []
    if not isinstance(secrets, dict):
        return out
    keys = secrets.get("keys") or []
    if not isinstance(keys, list):
        return out
    ids: list[str] = []
    for i, key in enumerate(keys):
        if not isinstance(key, dict):
            continue
        kid = key.get("id")
        if isinstance(kid, str) and kid:
            if not KEY_ID_RE.match(kid):
                out.append(
                    Issue(
                        file,
                        f"secrets.keys[{i}].id",
                        "invalid",
                        f"{kid!r} is not a key id: start with a letter or digit, then letters, digits, "
                        "'.', '_' or '-', at most 64 characters",
                    )
                )
            elif kid in ids:
                out.append(Issue(file, f"secrets.keys[{i}].id", "conflict", f"key id {kid!r} is used twice"))
            ids.append(kid)
        material = key.get("material")
        if isinstance(material, str) and "${" not in material:
            problem = _material_problem(material)
            if problem:
                out.append(
                    Issue(file, f"secrets.keys[{i}].material", "invalid", f"the key material {problem}")
                )
    active = secrets.get("active_key_id")
    if isinstance(active, str) and active:
        if not keys:
            out.append(
                Issue(
                    file,
                    "secrets.active_key_id",
                    "conflict",
                    f"names key {active!r} but secrets.keys is empty: list the key "
                    '(e.g. {id: k1, material: "${CREWLET_SECRETS_KEY}"})',
                )
            )
        elif active not in ids:
            out.append(
                Issue(
                    file,
                    "secrets.active_key_id",
                    "unknown_value",
                    f"{active!r} is not among secrets.keys ({', '.join(repr(k) for k in ids) or 'none'})",
                )
            )
    elif len(keys) > 1:
        out.append(
            Issue(
                file,
                "secrets.active_key_id",
                "missing",
                "several keys are listed: set secrets.active_key_id to the one new values are sealed under",
            )
        )
    return out
