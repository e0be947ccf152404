"""The node file (Tier A): one per process, restart-only (DESIGN.md "The node file").

The canonical keys are DESIGN.md's; the keys company.md §7 drafted differently
(``stream.type: memory``, ``objects.type: fs``, ``coordination.type: nats-kv``) are not offered.
Shape is checked by the pydantic models below (``extra="forbid"``: an unknown key is an error
naming its path); the cross-field refusals of spec/fleet.md §22 (FL-158) live in
:mod:`shared.config._node_rules`.

``${VAR}`` references are resolved when the file loads (FL-9); ``${VAR:-default}`` takes
``default`` when the variable is unset or empty (as in the shell and compose), so the deploy/ files
keep the compose fleet's values as defaults. An unset variable without a default is an error
naming the key, with one exception: ``node.id: "${CREWLET_NODE_ID}"`` with the variable unset
falls back to the default id ``node-0`` exactly as an absent ``node.id`` does (the seeds: "an unset
id is node-0 on every node"), and the node remembers the id came from the default so a clustered
member can refuse it (FL-9).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from ._env import VAR_RE, resolve_tree
from ._issues import ConfigInvalid, Issue, issues_from_pydantic, sort_issues
from ._retention import RetentionConfig, TrackerRetention
from ._yaml import read_yaml_mapping

__all__ = [
    "ALL_ROLES",
    "DEFAULT_NODE_ID",
    "NODE_ID_RE",
    "ApiConfig",
    "ApiToken",
    "CoordinationConfig",
    "NodeConfig",
    "NodeSection",
    "ObjectsConfig",
    "Role",
    "SecretsConfig",
    "SecretsKey",
    "StoreConfig",
    "StreamConfig",
    "load_node_file",
    "node_config_from_data",
]

Role = Literal["data", "ingress", "seats", "workers"]
ALL_ROLES: tuple[Role, ...] = ("data", "ingress", "seats", "workers")
"""The role vocabulary (FL-11), in canonical (sorted) order."""

DEFAULT_NODE_ID = "node-0"
NODE_ID_RE = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
"""Node id grammar (FL-9): a letter or digit, then letters, digits, ``.``, ``_``, ``-``; ≤ 64."""

Grant = Literal[
    "state:read",
    "audit:read",
    "config:read",
    "secrets:read",
    "work:write",
    "knowledge:write",
    "config:write",
    "secrets:write",
    "fleet:operate",
    "people:manage",
    "sandbox:run",
]
ALL_GRANTS: tuple[str, ...] = Grant.__args__  # type: ignore[attr-defined]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NodeSection(_Strict):
    """``node``: who this process is and what it is willing to do (FL-9..FL-14).

    Attributes:
        id: The node id; ``None`` until resolved (absent → ``CREWLET_NODE_ID`` → ``node-0``).
        roles: The role set; empty or absent means all four (FL-11).
        labels: Matched by ``role.placement``; values are trimmed at load (FL-13).
        max_concurrent: Agent turns this process runs at once (FL-14), ≥ 1.
    """

    id: str | None = None
    roles: list[Role] = Field(default_factory=lambda: list(ALL_ROLES))
    labels: dict[str, str] = Field(default_factory=dict)
    max_concurrent: Annotated[int, Field(ge=1, le=10_000)] = 32

    @field_validator("labels", mode="before")
    @classmethod
    def _trim_values(cls, v: Any) -> Any:
        if isinstance(v, dict):
            return {k: (val.strip() if isinstance(val, str) else val) for k, val in v.items()}
        return v


class ClusterConfig(_Strict):
    """``stream.cluster``: the embedded server's own membership (FL-4, FL-22, FL-23, FL-27).

    Attributes:
        name: The cluster name every member shares; required (FL-27).
        host: The address the route listener binds; ``""`` binds every interface (warned).
        port: The route listener port.
        advertise: ``host[:port]`` other members dial, when it differs from ``host``.
        peers: Route URLs of the *other* members (``nats://host:port``).
    """

    name: str = ""
    host: str = ""
    port: Annotated[int, Field(ge=1, le=65535)] = 6222
    advertise: str = ""
    peers: list[str] = Field(default_factory=list)


class LeafConfig(_Strict):
    """``stream.leaf``: a leaf listener on a member, or leaf remotes on a satellite (FL-21).

    Attributes:
        port: The leaf listener port on a member; ``None`` opens none.
        urls: Leaf remotes; non-empty makes this node's broker a ``leaf``.
    """

    port: Annotated[int, Field(ge=1, le=65535)] | None = None
    urls: list[str] = Field(default_factory=list)


class TlsConfig(_Strict):
    """``stream.tls``: client TLS files for an external cluster (FL-3); cert and key go together."""

    ca: str = ""
    cert: str = ""
    key: str = ""


class StreamConfig(_Strict):
    """``stream``: which broker this node uses and how (FL-3, FL-4, FL-21..FL-30).

    Attributes:
        type: ``embedded`` spawns a child ``nats-server``; ``nats`` dials ``url``.
        url: ``nats`` only: the server URL or a comma-separated failover set.
        replicas: Replicas of every stream and bucket (1, or 3 for a fleet; at most 5).
        store_dir: Embedded JetStream storage; ``""`` means ``<store.dir>/jetstream``.
        cluster: Embedded members only.
        leaf: Embedded only.
        credentials: ``nats`` only: an NKey/JWT creds file.
        token: ``nats`` only: an auth token.
        tls: ``nats`` only.
        sync: ``always`` (fsync before ack) or a duration like ``30s`` (FL-30).
        debug: Embedded only: pass broker debug output through.
        ack_wait_seconds: The seat mailboxes' ack window in seconds (FL-83: 30 min). A clean
            handover is a NAK (about a millisecond); this window only bounds how long mail a
            killed node had fetched waits before it is redelivered. Tests shorten it.
        max_deliver: Deliveries of one inbox message before it goes to the seat's dead-letter
            subject (FL-82: 25; 2..1 000). Tests shorten it.
        max_payload_bytes: The smallest server ``max_payload`` accepted (FL-3: 8 MB).
        tracker_retention: Snapshot interval, trim age and rejoin window (ES-52, ES-53, ES-59).
    """

    type: Literal["embedded", "nats"] = "embedded"
    url: str = ""
    replicas: Annotated[int, Field(ge=1)] = 1
    store_dir: str = ""
    cluster: ClusterConfig | None = None
    leaf: LeafConfig | None = None
    credentials: str = ""
    token: str = ""
    tls: TlsConfig | None = None
    sync: str = "always"
    debug: bool = False
    ack_wait_seconds: Annotated[float, Field(ge=1.0, le=86_400.0)] = 1800.0
    max_deliver: Annotated[int, Field(ge=2, le=1000)] = 25
    tracker_retention: TrackerRetention = Field(default_factory=TrackerRetention)


class CoordinationConfig(_Strict):
    """``coordination``: where leases live (FL-34, FL-38).

    Attributes:
        type: ``embedded-kv`` (the KV on the stream's connection) or ``local`` (this process only).
        lease_ttl_seconds: Seat and presence lease TTL in seconds; heartbeat = TTL/3 (FL-52).
        bucket_prefix: Prefix of every coordination bucket (FL-34, FL-41).
    """

    type: Literal["embedded-kv", "local"] = "embedded-kv"
    lease_ttl_seconds: float = 45.0
    bucket_prefix: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,32}$")] = "crewlet"


class ObjectsConfig(_Strict):
    """``store.objects``: the one object store the fleet shares (ES-70, FL-5).

    Attributes:
        type: ``nats`` (JetStream object store on the fleet's broker) or ``s3``.
        bucket: The bucket name.
        endpoint_url: ``s3`` only: the S3 endpoint; ``""`` = AWS default.
        region: ``s3`` only.
    """

    type: Literal["nats", "s3"] = "nats"
    bucket: Annotated[str, Field(min_length=1, max_length=63)] = "crewlet-files"
    endpoint_url: str = ""
    region: str = "us-east-1"


class StoreConfig(_Strict):
    """``store``: this node's own disk.

    Attributes:
        dir: Directory of ``estate.db``, ``node.db`` and ``snapshots/``; ``""`` means
            ``./.crewlet/<node-id>``.
        scratch: True on a node without ``data``: wiped at every boot (FL-17).
        snapshot_dir: Where this data node keeps its one snapshot artefact (ES-53); ``""``
            means ``<dir>/snapshots``. Refused on a node without ``data`` (ES-2).
        objects: The shared object store.
    """

    dir: str = ""
    scratch: bool = False
    snapshot_dir: str = ""
    objects: ObjectsConfig = Field(default_factory=ObjectsConfig)


class ApiToken(_Strict):
    """One API bearer token (CO-27). ``token`` must be at least 26 characters."""

    id: Annotated[str, Field(min_length=1)]
    token: str
    grants: list[Grant] = Field(default_factory=lambda: list(ALL_GRANTS))  # type: ignore[arg-type]


class ApiAuth(_Strict):
    """``api.auth``: the bearer tokens this node accepts."""

    tokens: list[ApiToken] = Field(default_factory=list)


class ApiConfig(_Strict):
    """``api``: the HTTP listener (FL-12, FL-16). ``port: 0`` binds nothing."""

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 8080
    auth: ApiAuth = Field(default_factory=ApiAuth)


class TelemetryConfig(_Strict):
    """``telemetry``: OTLP export (FL-6). ``otlp_endpoint`` ``""`` → ``OTEL_EXPORTER_OTLP_ENDPOINT``."""

    otlp_endpoint: str = ""
    capture_content: bool = False


class LoggingConfig(_Strict):
    """``logging``: level and format of the structured log."""

    level: Literal["debug", "info", "warn", "warning", "error"] = "info"
    format: Literal["json", "console"] = "json"


class SecretsKey(_Strict):
    """One key of the keyring (``secrets.keys[i]``, CO-40, FL-151).

    Attributes:
        id: The key id written into every envelope it seals (``enc:v1:<id>:...``): letters,
            digits, ``.``, ``_``, ``-``, at most 64 characters (never ``:``, the envelope's separator).
        material: Base64 of exactly 32 bytes (an AES-256 key), usually ``"${CREWLET_SECRETS_KEY}"``
            resolved when the file loads. ``crewlet secrets keygen`` prints one. Never logged.
    """

    id: Annotated[str, Field(min_length=1)]
    material: str = Field(repr=False)


class SecretsConfig(_Strict):
    """``secrets``: the fleet's keyring (CO-40, FL-151, FL-107).

    Every node of a fleet carries the same keys: a value sealed by one node is opened by all. A
    solo embedded node may leave this out; it then keeps a generated keyring in its store (see
    :meth:`shared.secrets.Keyring.for_node`). The refusals (material, duplicate ids, the active
    key) live in :mod:`shared.config._node_rules`.

    Attributes:
        active_key_id: The key new values are sealed under; defaults to the only key when exactly
            one is given. ``""`` with no keys.
        keys: Every key this node can open with. Keep an old key listed until ``crewlet secrets
            rekey`` has re-sealed every value under the active one (CO-40).
    """

    active_key_id: str = ""
    keys: list[SecretsKey] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _default_active(cls, v: Any) -> Any:
        if isinstance(v, dict) and not v.get("active_key_id"):
            keys = v.get("keys")
            if isinstance(keys, list) and len(keys) == 1 and isinstance(keys[0], dict):
                only = keys[0].get("id")
                if isinstance(only, str):
                    return {**v, "active_key_id": only}
        return v


class NodeConfig(_Strict):
    """A whole, validated node file (Tier A).

    Attributes:
        id_from_default: True when no id was configured and ``node-0`` was used (FL-9).
        source: The file it came from (``""`` when built in memory, e.g. by ``crewlet run``).
    """

    node: NodeSection = Field(default_factory=NodeSection)
    stream: StreamConfig = Field(default_factory=StreamConfig)
    coordination: CoordinationConfig = Field(default_factory=CoordinationConfig)
    store: StoreConfig = Field(default_factory=StoreConfig)
    api: ApiConfig = Field(default_factory=ApiConfig)
    telemetry: TelemetryConfig = Field(default_factory=TelemetryConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    secrets: SecretsConfig = Field(default_factory=SecretsConfig)
    retention: RetentionConfig = Field(default_factory=RetentionConfig)
    id_from_default: SkipJsonSchema[bool] = False
    source: SkipJsonSchema[str] = ""

    @property
    def node_id(self) -> str:
        """The resolved node id (never ``None`` after loading)."""
        return self.node.id or DEFAULT_NODE_ID

    @property
    def roles(self) -> frozenset[str]:
        """The resolved role set (all four when empty)."""
        return frozenset(self.node.roles or ALL_ROLES)

    @property
    def broker_kind(self) -> Literal["member", "leaf", "client"]:
        """``member`` / ``leaf`` / ``client``, from the stream block only (FL-21)."""
        if self.stream.type == "nats":
            return "client"
        if self.stream.leaf is not None and self.stream.leaf.urls:
            return "leaf"
        return "member"

    @property
    def store_dir(self) -> Path:
        """This node's store directory."""
        return Path(self.store.dir) if self.store.dir else Path(".crewlet") / self.node_id

    @property
    def snapshot_dir(self) -> Path:
        """This data node's snapshot directory (ES-53)."""
        return Path(self.store.snapshot_dir) if self.store.snapshot_dir else self.store_dir / "snapshots"

    @property
    def jetstream_dir(self) -> Path:
        """Where an embedded broker keeps JetStream data."""
        return Path(self.stream.store_dir) if self.stream.store_dir else self.store_dir / "jetstream"

    @property
    def clustered(self) -> bool:
        """True for an embedded member that names a cluster, lists peers or opens a leaf port."""
        s = self.stream
        if s.type != "embedded":
            return False
        return bool(
            (s.cluster is not None and (s.cluster.name or s.cluster.peers))
            or (s.leaf is not None and s.leaf.port)
        )


_EMPTY_ROLES = object()


def _resolve(
    data: Mapping[str, Any], env: Mapping[str, str], file: str, *, strict_env: bool = True
) -> tuple[dict[str, Any], list[Issue]]:
    issues: list[Issue] = []
    data = dict(data)
    node = data.get("node")
    id_ref_unset = False
    if isinstance(node, dict) and node.get("id") == "${CREWLET_NODE_ID}" and "CREWLET_NODE_ID" not in env:
        node = dict(node)
        node.pop("id")
        data["node"] = node
        id_ref_unset = True

    def unset(path: str, name: str) -> str:
        if not strict_env:  # validating a file meant for another machine: keep the reference, warn
            issues.append(
                Issue(
                    file,
                    path,
                    "missing",
                    f"${{{name}}} is not set here; it must be set where the node runs",
                    "warning",
                )
            )
            return f"${{{name}}}"
        issues.append(
            Issue(
                file, path, "missing", f"${{{name}}} is not set in the environment; set it or write the value"
            )
        )
        return ""

    resolved = resolve_tree(data, env, on_unset=unset)
    _malformed_refs(data, file, issues)
    if id_ref_unset:
        resolved.setdefault("node", {})
    return resolved, issues


def _malformed_refs(data: Any, file: str, issues: list[Issue], path: str = "") -> None:
    """Name every ``${`` that is not a ``${NAME}`` / ``${NAME:-default}`` reference (``${A-b}``,
    ``${ X }``, an unclosed one): left alone it would become a literal value, e.g. a token no one
    meant to set."""
    if isinstance(data, str):
        if "${" in VAR_RE.sub("", data):
            issues.append(
                Issue(
                    file,
                    path,
                    "invalid",
                    "a ${...} reference must be ${NAME} or ${NAME:-default} with NAME of "
                    "letters, digits and _",
                )
            )
    elif isinstance(data, dict):
        for k, v in data.items():
            _malformed_refs(v, file, issues, f"{path}.{k}" if path else str(k))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            _malformed_refs(v, file, issues, f"{path}[{i}]")


def node_config_from_data(
    data: Mapping[str, Any],
    *,
    file: str = "",
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    check_files: bool = True,
    strict_env: bool = True,
) -> tuple[NodeConfig | None, list[Issue]]:
    """Validate node-file data: resolve ``${VAR}``, check shape, then every Tier A refusal.

    Args:
        data: The parsed YAML mapping.
        file: The file name to put in every issue.
        env: Where ``${VAR}`` and ``CREWLET_NODE_ID`` / ``CREWLET_ROLES`` are read; ``os.environ``
            when None.
        overrides: Per-process overrides (FL-12): ``roles`` (list of names), ``api_host``,
            ``api_port``, ``store_dir``; applied before validation so refusals see them.
        check_files: Whether TLS files must exist (FL-3); off for pure document checks.
        strict_env: True at boot: an unset ``${VAR}`` is an error naming the key. False for
            ``crewlet validate``, which may check a file meant for another machine: an unset
            reference is a warning and stays in place.

    Returns:
        ``(config, issues)``: ``config`` is None when any issue is an error; ``issues`` holds every
        error and warning in stable order (FL-158).
    """
    from ._node_rules import check_node  # the refusals table (FL-158)

    env = os.environ if env is None else env
    resolved, issues = _resolve(data, env, file, strict_env=strict_env)
    node = resolved.get("node")
    if node is None:
        node = resolved["node"] = {}
    id_from_default = False
    if isinstance(node, dict):
        if not node.get("id"):
            env_id = env.get("CREWLET_NODE_ID", "")
            if env_id:
                node["id"] = env_id
            else:
                node["id"] = DEFAULT_NODE_ID
                id_from_default = True
        if overrides and overrides.get("roles"):
            node["roles"] = list(overrides["roles"])
        elif env.get("CREWLET_ROLES"):
            node["roles"] = [r.strip() for r in env["CREWLET_ROLES"].split(",") if r.strip()]
        if node.get("roles") in (None, []):
            node["roles"] = list(ALL_ROLES)
    if overrides:
        api = resolved.setdefault("api", {})
        store = resolved.setdefault("store", {})
        if isinstance(api, dict):
            if overrides.get("api_host") is not None:
                api["host"] = overrides["api_host"]
            if overrides.get("api_port") is not None:
                api["port"] = overrides["api_port"]
        if isinstance(store, dict) and overrides.get("store_dir") is not None:
            store["dir"] = str(overrides["store_dir"])
    cfg: NodeConfig | None = None
    try:
        cfg = NodeConfig.model_validate({**resolved, "id_from_default": id_from_default, "source": file})
    except ValidationError as e:
        issues += issues_from_pydantic(e.errors(), file=file)
        for key in ("id_from_default", "source"):
            if key in resolved:
                issues.append(Issue(file, key, "unknown_field", "unknown key"))
    issues += check_node(resolved, cfg, file=file, check_files=check_files)
    issues = sort_issues(issues)
    if any(i.severity == "error" for i in issues):
        return None, issues
    if cfg is not None and cfg.node.roles:
        cfg = cfg.model_copy(
            update={"node": cfg.node.model_copy(update={"roles": sorted(set(cfg.node.roles))})}
        )
    return cfg, issues


def load_node_file(
    path: str | Path,
    *,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> tuple[NodeConfig, list[Issue]]:
    """Read and validate a node file.

    Args:
        path: The YAML file.
        env: See :func:`node_config_from_data`.
        overrides: See :func:`node_config_from_data`.

    Returns:
        ``(config, warnings)``.

    Raises:
        ConfigInvalid: the file is missing, empty, not YAML, or breaks any Tier A rule; every
            error is listed with the file and the path inside it.
    """
    data = read_yaml_mapping(path)
    cfg, issues = node_config_from_data(data, file=str(path), env=env, overrides=overrides)
    if cfg is None:
        raise ConfigInvalid(issues)
    return cfg, [i for i in issues if i.severity == "warning"]
