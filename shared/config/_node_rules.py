"""The Tier A refusals and warnings of spec/fleet.md §22 (FL-158) that concern the node file.

Every rule reads the *resolved raw* document defensively, so the rules still run on the parts
that are well-shaped when other parts have shape errors: one run reports every mistake. Each
refusal names the field and the way out.

The rules (requirement in brackets); those about the ``stream`` block (FL-3, FL-4, FL-22..FL-30)
are :mod:`shared.config._stream_rules`, the keyring's (CO-40, FL-151) are
:mod:`shared.config._keyring_rules`, and :func:`check_node` runs them all:

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

import re
from typing import Any

from ._issues import Findings, Issue
from ._keyring_rules import check_keyring
from ._node import ALL_ROLES, NODE_ID_RE, NodeConfig
from ._retention import MIN_AGE_RANGE, SNAPSHOTS_KEPT, TEST_TIMINGS_ENV, test_timings
from ._stream_rules import StreamShape, check_stream, count_peers, stream_shape

__all__ = ["check_node", "count_peers"]

_NODE_ID = re.compile(NODE_ID_RE)
MIN_TOKEN_CHARS = 26
"""A bearer token shorter than this is refused (CO-27)."""
MIN_BUCKET_AGE_SECONDS = 0.1
"""The broker's floor for any bucket age or TTL (FL-34)."""


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
    f = Findings(file)
    shape = stream_shape(raw)
    _check_identity(raw, cfg, shape, f)
    has_data = _check_roles(raw, shape, f)
    members = check_stream(shape, f, check_files=check_files)
    _check_coordination(raw, shape, members, f)
    _check_tokens(raw, f)
    f.extend(check_keyring(_get(raw, "secrets"), file))
    if cfg is not None:
        f.extend(_check_retention(raw, cfg, file, has_data=has_data))
    return f.items


def _check_identity(raw: dict[str, Any], cfg: NodeConfig | None, shape: StreamShape, f: Findings) -> None:
    """FL-9 (the node id; a clustered member's own id) and FL-13 (label keys)."""
    # FL-9 node id
    node_id = _get(raw, "node", "id")
    if isinstance(node_id, str) and not _NODE_ID.match(node_id):
        f.err(
            "node.id",
            "invalid",
            f"{node_id!r} is not a node id: start with a letter or digit, then letters, digits, '.', '_' "
            "or '-', at most 64 characters",
        )
    if shape.clustered and cfg is not None and cfg.id_from_default:
        f.err(
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
                f.err(f"node.labels.{key}", "invalid", problem)


def _check_roles(raw: dict[str, Any], shape: StreamShape, f: Findings) -> bool:
    """FL-17: the role pairings and the scratch store; returns whether the node has ``data``."""
    kind = shape.kind
    # FL-17 role pairings
    roles_raw = _get(raw, "node", "roles")
    roles = {r for r in roles_raw if isinstance(r, str)} if isinstance(roles_raw, list) else set(ALL_ROLES)
    roles &= set(ALL_ROLES)
    has_data = "data" in roles
    if has_data and kind == "leaf":
        f.err(
            "node.roles",
            "conflict",
            "a data node cannot sit on a leaf broker (stream.leaf.urls): remove stream.leaf.urls to make it a "
            "broker member, or remove data from node.roles to run it as a stateless satellite",
        )
    if not has_data and kind == "member":
        f.err(
            "node.roles",
            "conflict",
            "a broker member without data would hold the fleet's streams with no estate copy: add data to "
            "node.roles, or set stream.leaf.urls (or stream.type: nats) so this node joins as a leaf or client",
        )
    for role in ("ingress", "workers"):
        if role in roles and not has_data:
            f.err(
                "node.roles",
                "conflict",
                f"{role} reads this node's own estate copy and needs data on the same node: add data to "
                f"node.roles, or run {role} on a data node",
            )
    scratch = _get(raw, "store", "scratch")
    if not has_data and scratch is not True:
        f.err(
            "store.scratch",
            "missing",
            "a node without data keeps no estate: set store.scratch: true (its store is wiped at every boot), "
            "or add data to node.roles",
        )
    if has_data and scratch is True:
        f.err(
            "store.scratch",
            "conflict",
            "a data node keeps the estate on its disk; scratch (wiped at every boot) is only for nodes "
            "without data: remove store.scratch or remove data from node.roles",
        )
    return has_data


def _check_coordination(raw: dict[str, Any], shape: StreamShape, members: int, f: Findings) -> None:
    """FL-38 (local leases only on a lone embedded node) and FL-34 (the lease TTL floor)."""
    stype, clustered = shape.stype, shape.clustered
    # FL-38 coordination
    ctype = _get(raw, "coordination", "type")
    if ctype == "local" and (stype == "nats" or clustered or members > 1):
        f.err(
            "coordination.type",
            "conflict",
            "local leases live in this process only, so every node would believe it owns the whole company: use "
            "coordination.type: embedded-kv with a clustered or external stream",
        )
    ttl = _get(raw, "coordination", "lease_ttl_seconds")
    if isinstance(ttl, int | float) and not isinstance(ttl, bool) and ttl < MIN_BUCKET_AGE_SECONDS:
        f.err(
            "coordination.lease_ttl_seconds",
            "out_of_range",
            f"{ttl} s is below the broker's 100 ms floor for a bucket age (FL-34)",
        )


def _check_tokens(raw: dict[str, Any], f: Findings) -> None:
    """CO-27: an open API port needs a token; tokens long enough; token ids unique."""
    # CO-27 tokens
    port = _get(raw, "api", "port")
    port = 8080 if port is None else port
    tokens = _get(raw, "api", "auth", "tokens") or []
    if isinstance(port, int) and port > 0 and isinstance(tokens, list) and not tokens:
        f.err(
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
                f.err(
                    f"api.auth.tokens[{i}].token",
                    "out_of_range",
                    f"a token must be at least {MIN_TOKEN_CHARS} characters (got {len(value)})",
                )
            tid = tok.get("id")
            if isinstance(tid, str):
                if tid in ids:
                    f.err(f"api.auth.tokens[{i}].id", "conflict", f"token id {tid!r} is used twice")
                ids.add(tid)


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
