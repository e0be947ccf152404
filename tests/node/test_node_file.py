"""The node file (Tier A): every refusal of fleet.md §22 that concerns its keys, one case per row (FL-158)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from shared.config import ConfigInvalid, load_node_file, node_config_from_data

TOKEN = {"api": {"auth": {"tokens": [{"id": "ops", "token": "t" * 30}]}}}


def check(data: dict[str, Any], env: dict[str, str] | None = None) -> tuple[bool, list[tuple[str, str, str]]]:
    merged = {**TOKEN, **data}
    cfg, issues = node_config_from_data(merged, file="n.yaml", env=env or {}, check_files=True)
    return cfg is not None, [(i.path, i.severity, i.message) for i in issues]


KEY_A = base64.b64encode(bytes(range(32))).decode()
KEY_B = base64.b64encode(bytes(range(32, 64))).decode()
KEY16 = base64.b64encode(bytes(16)).decode()
KEY_K1 = {"id": "k1", "material": KEY_A}


def cluster(peers: list[str], **extra: Any) -> dict[str, Any]:
    return {"name": "c1", "host": "10.0.0.1", "port": 6222, "peers": peers, **extra}


REFUSALS: list[tuple[str, dict[str, Any], str, str]] = [
    # (case, document, path named, words the message must carry)
    ("unknown role", {"node": {"roles": ["seat"]}}, "node.roles[0]", "seats"),
    ("id grammar: leading dash", {"node": {"id": "-a"}}, "node.id", "not a node id"),
    ("id grammar: 65 characters", {"node": {"id": "a" * 65}}, "node.id", "at most 64"),
    (
        "clustered member with the default id",
        {"stream": {"replicas": 3, "cluster": cluster(["nats://10.0.0.2:6222", "nats://10.0.0.3:6222"])}},
        "node.id",
        "stable id",
    ),
    (
        "label key of 64 bytes",
        {"node": {"labels": {"k" * 64: "v"}}},
        "node.labels." + "k" * 64,
        "1 to 63 bytes",
    ),
    ("label key with whitespace", {"node": {"labels": {"a b": "v"}}}, "node.labels.a b", "whitespace"),
    (
        "ingress without data",
        {
            "node": {"roles": ["ingress"]},
            "stream": {"type": "nats", "url": "nats://x:4222"},
            "store": {"scratch": True},
        },
        "node.roles",
        "needs data",
    ),
    (
        "workers without data",
        {
            "node": {"roles": ["seats", "workers"]},
            "stream": {"type": "nats", "url": "nats://x:4222"},
            "store": {"scratch": True},
        },
        "node.roles",
        "workers reads",
    ),
    (
        "a leaf remote that is not a URL",
        {
            "node": {"id": "s1", "roles": ["seats"]},
            "store": {"scratch": True},
            "stream": {"leaf": {"urls": ["nats-leaf://hub:7422", "not a url"]}},
        },
        "stream.leaf.urls[1]",
        "nats-leaf://HOST:PORT",
    ),
    (
        "a leaf remote over http",
        {
            "node": {"id": "s1", "roles": ["seats"]},
            "store": {"scratch": True},
            "stream": {"leaf": {"urls": ["http://hub:7422"]}},
        },
        "stream.leaf.urls[0]",
        "not a leaf remote",
    ),
    (
        "a leaf listener on the route port",
        {
            "node": {"id": "n1"},
            "stream": {
                "replicas": 3,
                "store_dir": "/tmp/js",
                "cluster": cluster(["nats://10.0.0.2:6222", "nats://10.0.0.3:6222"], port=6222),
                "leaf": {"port": 6222},
            },
        },
        "stream.leaf.port",
        "also stream.cluster.port",
    ),
    (
        "data on a leaf",
        {"node": {"id": "n1"}, "stream": {"leaf": {"urls": ["nats-leaf://hub:7422"]}}},
        "node.roles",
        "leaf",
    ),
    (
        "broker member without data",
        {"node": {"roles": ["seats"]}, "store": {"scratch": True}},
        "node.roles",
        "broker member without data",
    ),
    (
        "no store.scratch without data",
        {"node": {"roles": ["seats"]}, "stream": {"type": "nats", "url": "nats://x:4222"}},
        "store.scratch",
        "store.scratch: true",
    ),
    (
        "two-member cluster",
        {"node": {"id": "n1"}, "stream": {"cluster": cluster(["nats://10.0.0.2:6222"])}},
        "stream.cluster.peers",
        "one member or three",
    ),
    (
        "peer list naming only this node",
        {"node": {"id": "n1"}, "stream": {"cluster": cluster(["nats://10.0.0.1:6222"])}},
        "stream.cluster.peers",
        "only this node",
    ),
    (
        "undialable peer entry",
        {"node": {"id": "n1"}, "stream": {"cluster": cluster(["nats://10.0.0.2", "x:1", "y:2"])}},
        "stream.cluster.peers[0]",
        "host and a port",
    ),
    ("replicas above five", {"stream": {"replicas": 6}}, "stream.replicas", "ceiling of 5"),
    (
        "replicas above one with no peers",
        {"stream": {"replicas": 3}},
        "stream.replicas",
        "nothing to replicate",
    ),
    (
        "cluster block without a name",
        {"node": {"id": "n1"}, "stream": {"cluster": {"host": "10.0.0.1"}}},
        "stream.cluster.name",
        "needs a name",
    ),
    (
        "stream.cluster with nats",
        {"stream": {"type": "nats", "url": "nats://x:4222", "cluster": {"name": "c"}}},
        "stream.cluster",
        "not read with stream.type: nats",
    ),
    (
        "store_dir with nats",
        {"stream": {"type": "nats", "url": "nats://x:4222", "store_dir": "/d"}},
        "stream.store_dir",
        "remove stream.store_dir",
    ),
    (
        "store_dir with a leaf",
        {
            "node": {"roles": ["seats"]},
            "store": {"scratch": True},
            "stream": {"leaf": {"urls": ["nats-leaf://hub:7422"]}, "store_dir": "/d"},
        },
        "stream.store_dir",
        "leaf broker",
    ),
    (
        "local coordination beside an external stream",
        {"stream": {"type": "nats", "url": "nats://x:4222"}, "coordination": {"type": "local"}},
        "coordination.type",
        "embedded-kv",
    ),
    (
        "local coordination beside a clustered stream",
        {
            "node": {"id": "n1"},
            "coordination": {"type": "local"},
            "stream": {"replicas": 3, "cluster": cluster(["nats://10.0.0.2:6222", "nats://10.0.0.3:6222"])},
        },
        "coordination.type",
        "embedded-kv",
    ),
    (
        "tls cert without key",
        {"stream": {"type": "nats", "url": "nats://x:4222", "tls": {"cert": "/c.pem"}}},
        "stream.tls.key",
        "set both or neither",
    ),
    (
        "missing TLS CA file",
        {"stream": {"type": "nats", "url": "nats://x:4222", "tls": {"ca": "/nope/ca.pem"}}},
        "stream.tls.ca",
        "/nope/ca.pem: no such file or directory",
    ),
    (
        "stream.debug with nats",
        {"stream": {"type": "nats", "url": "nats://x:4222", "debug": True}},
        "stream.debug",
        "embedded broker",
    ),
    ("nats without url", {"stream": {"type": "nats"}}, "stream.url", "needs stream.url"),
    ("sync window below three replicas", {"stream": {"sync": "30s"}}, "stream.sync", "below three replicas"),
    (
        "lease TTL below the broker floor",
        {"coordination": {"lease_ttl_seconds": 0.05}},
        "coordination.lease_ttl_seconds",
        "100 ms floor",
    ),
    (
        "short API token",
        {"api": {"auth": {"tokens": [{"id": "a", "token": "short"}]}}},
        "api.auth.tokens[0].token",
        "at least 26",
    ),
    (
        "API port with no token",
        {"api": {"port": 8080, "auth": {"tokens": []}}},
        "api.auth.tokens",
        "needs at least one token",
    ),
    (
        "keyring material not base64",
        {"secrets": {"keys": [{"id": "k1", "material": "not base64!"}]}},
        "secrets.keys[0].material",
        "not valid base64",
    ),
    (
        "keyring material of 16 bytes",
        {"secrets": {"keys": [{"id": "k1", "material": KEY16}]}},
        "secrets.keys[0].material",
        "decodes to 16 bytes",
    ),
    (
        "keyring material empty",
        {"secrets": {"keys": [{"id": "k1", "material": ""}]}},
        "secrets.keys[0].material",
        "keygen",
    ),
    (
        "keyring duplicate key ids",
        {"secrets": {"active_key_id": "k1", "keys": [KEY_K1, {"id": "k1", "material": KEY_B}]}},
        "secrets.keys[1].id",
        "used twice",
    ),
    (
        "keyring active key not among keys",
        {"secrets": {"active_key_id": "k9", "keys": [KEY_K1]}},
        "secrets.active_key_id",
        "not among secrets.keys",
    ),
    (
        "keyring of two keys without an active one",
        {"secrets": {"keys": [KEY_K1, {"id": "k2", "material": KEY_B}]}},
        "secrets.active_key_id",
        "several keys",
    ),
    (
        "keyring active key with no keys",
        {"secrets": {"active_key_id": "k1"}},
        "secrets.active_key_id",
        "secrets.keys is empty",
    ),
    (
        "keyring key id with a colon",
        {"secrets": {"keys": [{"id": "k:1", "material": KEY_A}]}},
        "secrets.keys[0].id",
        "not a key id",
    ),
    (
        "keyring key without material",
        {"secrets": {"keys": [{"id": "k1"}]}},
        "secrets.keys[0].material",
        "required",
    ),
    ("unknown key", {"node": {"idd": "x"}}, "node.idd", "unknown key"),
    ("wrong type", {"node": {"max_concurrent": "many"}}, "node.max_concurrent", "integer"),
]


@pytest.mark.parametrize(("case", "doc", "path", "words"), REFUSALS, ids=[r[0] for r in REFUSALS])
def test_each_refusal_names_its_field(case: str, doc: dict[str, Any], path: str, words: str) -> None:
    ok, issues = check(doc)
    assert not ok, f"{case}: accepted"
    errors = [(p, m) for p, sev, m in issues if sev == "error"]
    assert any(p == path and words in m for p, m in errors), f"{case}: {errors}"


def test_defaults_are_the_single_node_shape() -> None:
    ok, issues = check({})
    assert ok and issues == []
    cfg, _ = node_config_from_data(TOKEN, env={})
    assert cfg is not None
    assert cfg.node_id == "node-0" and cfg.id_from_default
    assert sorted(cfg.roles) == ["data", "ingress", "seats", "workers"]
    assert cfg.node.max_concurrent == 32
    assert cfg.broker_kind == "member" and cfg.stream.type == "embedded"
    assert cfg.coordination.type == "embedded-kv" and cfg.coordination.lease_ttl_seconds == 45


def test_good_ids_and_env_id() -> None:
    assert check({"node": {"id": "a_b-1.x"}})[0]
    cfg, _ = node_config_from_data(
        {**TOKEN, "node": {"id": "${CREWLET_NODE_ID}"}}, env={"CREWLET_NODE_ID": "pod-7"}
    )
    assert cfg is not None and cfg.node_id == "pod-7" and not cfg.id_from_default
    cfg, _ = node_config_from_data(TOKEN, env={"CREWLET_NODE_ID": "pod-8"})
    assert cfg is not None and cfg.node_id == "pod-8"


def test_peer_counting_discounts_self_and_repeats_with_warnings() -> None:
    ok, issues = check(
        {
            "node": {"id": "n1"},
            "stream": {
                "replicas": 3,
                "cluster": cluster(
                    [
                        "nats://10.0.0.1:6222",
                        "nats://10.0.0.2:6222",
                        "NATS://10.0.0.3:6222",
                        "nats://10.0.0.3:6222",
                    ]
                ),
            },
        }
    )
    assert ok, issues
    warnings = [p for p, sev, _ in issues if sev == "warning" and p.startswith("stream.")]
    assert warnings == ["stream.cluster.peers[0]", "stream.cluster.peers[3]"]


def test_more_than_four_other_peers_warns() -> None:
    peers = [f"nats://10.0.0.{i}:6222" for i in range(2, 7)]
    ok, issues = check({"node": {"id": "n1"}, "stream": {"replicas": 5, "cluster": cluster(peers)}})
    assert ok
    assert ("stream.cluster.peers", "warning") in [(p, s) for p, s, _ in issues]


def test_labels_are_trimmed_and_roles_overridden() -> None:
    cfg, _ = node_config_from_data(
        {**TOKEN, "node": {"labels": {"zone": " eu "}}}, env={}, overrides={"roles": ["data", "ingress"]}
    )
    assert cfg is not None and cfg.node.labels == {"zone": "eu"}
    assert sorted(cfg.roles) == ["data", "ingress"]
    cfg, _ = node_config_from_data(TOKEN, env={"CREWLET_ROLES": "data,seats"})
    assert cfg is not None and sorted(cfg.roles) == ["data", "seats"]


def test_unset_variable_is_named() -> None:
    ok, issues = check({"api": {"auth": {"tokens": [{"id": "a", "token": "${NOT_SET_ANYWHERE}"}]}}})
    assert not ok
    assert any(
        p == "api.auth.tokens[0].token" and "${NOT_SET_ANYWHERE} is not set" in m for p, _, m in issues
    )


def test_every_mistake_reported_in_a_stable_order() -> None:
    doc = {
        "node": {"id": "-x", "roles": ["ingress", "bogus"], "labels": {"a b": "v"}},
        "stream": {"replicas": 9},
        "coordination": {"type": "local"},
        "extra": 1,
    }
    first = check(doc)[1]
    assert first == check(doc)[1]
    paths = [p for p, sev, _ in first if sev == "error"]
    assert {"node.id", "node.roles[1]", "node.labels.a b", "stream.replicas", "extra", "node.roles"} <= set(
        paths
    )
    assert paths == sorted(paths)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, "no such file"),
        ("", "file is empty"),
        ("node: [1, 2\n", "YAML syntax error: line"),
        ("- a\n- b\n", "top level must be a mapping"),
        ("# only a comment\n", "empty"),
    ],
)
def test_file_level_mistakes_name_the_file(tmp_path: Path, content: str | None, words: str) -> None:
    path = tmp_path / "crewlet.yaml"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigInvalid) as e:
        load_node_file(path, env={})
    assert e.value.issues[0].file == str(path)
    assert words in e.value.issues[0].message


def test_keyring_from_the_environment_with_one_key_active_by_default() -> None:
    doc = {"secrets": {"keys": [{"id": "k1", "material": "${CREWLET_SECRETS_KEY}"}]}}
    cfg, issues = node_config_from_data({**TOKEN, **doc}, env={"CREWLET_SECRETS_KEY": KEY_A})
    assert cfg is not None, issues
    assert cfg.secrets.active_key_id == "k1" and cfg.secrets.keys[0].material == KEY_A
    assert KEY_A not in repr(cfg)  # material never shows in a repr (a log line or a traceback)
    ok, issues = check(doc)
    assert not ok
    assert any(
        p == "secrets.keys[0].material" and "${CREWLET_SECRETS_KEY} is not set" in m for p, _, m in issues
    )
    cfg, _ = node_config_from_data(TOKEN, env={})
    assert cfg is not None and cfg.secrets.keys == [] and cfg.secrets.active_key_id == ""


def test_keyring_rotation_shape_is_accepted_and_messages_never_echo_material() -> None:
    ok, issues = check(
        {"secrets": {"active_key_id": "k2", "keys": [KEY_K1, {"id": "k2", "material": KEY_B}]}}
    )
    assert ok and issues == []
    _, issues = check({"secrets": {"keys": [{"id": "k1", "material": "c2VjcmV0LXZhbHVl"}]}})
    assert issues and all("c2VjcmV0LXZhbHVl" not in m for _, _, m in issues)
