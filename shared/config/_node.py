"""The node file's shape (Tier A): one per process, restart-only (DESIGN.md "The node file").

The canonical keys are DESIGN.md's; the keys company.md §7 drafted differently
(``stream.type: memory``, ``objects.type: fs``, ``coordination.type: nats-kv``) are not offered.
Shape is checked by the pydantic models below (``extra="forbid"``: an unknown key is an error
naming its path). Loading a file (``${VAR}`` resolution, the per-process overrides) is
:mod:`shared.config._node_load`; the cross-field refusals of spec/fleet.md §22 (FL-158) live in
:mod:`shared.config._node_rules`, which reads these models and is read by the loader.

"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from ._retention import RetentionConfig, TrackerRetention

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
    key) live in :mod:`shared.config._keyring_rules`.

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
