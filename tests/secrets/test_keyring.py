"""The keyring: AES-256-GCM envelopes, key ids, and where a node's keys come from (CO-40, FL-151, FL-107)."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs
from typer.testing import CliRunner

import shared.secrets
from crewlet.cli import app
from shared.config import NodeConfig, node_config_from_data
from shared.errors import UsageError
from shared.secrets import (
    Keyring,
    KeyringInvalid,
    KeyringMissing,
    SecretsError,
    Unopenable,
    generate_key_material,
)

from .conftest import KEY_NEW, KEY_OLD, b64, keyring

TOKEN = {"api": {"auth": {"tokens": [{"id": "ops", "token": "t" * 30}]}}}


def node_cfg(tmp_path: Path, **sections: Any) -> NodeConfig:
    cfg, issues = node_config_from_data(
        {**TOKEN, "node": {"id": "n1"}, "store": {"dir": str(tmp_path / "store")}, **sections}, env={}
    )
    assert cfg is not None, issues
    return cfg


def test_public_names() -> None:
    assert sorted(shared.secrets.__all__) == sorted(
        [
            "ENVELOPE_PREFIX",
            "KEYRING_FILE",
            "KEY_BYTES",
            "MAX_NAME_CHARS",
            "MAX_VALUE_BYTES",
            "NAME_PATTERN",
            "InvalidSecretName",
            "Keyring",
            "KeyringInvalid",
            "KeyringMissing",
            "RekeyReport",
            "SecretInfo",
            "SecretStore",
            "SecretTooLarge",
            "SecretsError",
            "Unopenable",
            "UnopenableReason",
            "generate_key_material",
            "keyring_missing",
            "secret_values",
            "validate_name",
        ]
    )
    for name in shared.secrets.__all__:
        assert hasattr(shared.secrets, name), name
    assert issubclass(KeyringMissing, UsageError) and issubclass(KeyringMissing, SecretsError)
    assert not Unopenable("x", reason="unsealed").retryable


def test_seal_open_round_trip_and_envelope_shape() -> None:
    ring = keyring()
    token = ring.seal(b"s3cr3t-value", aad=b"OPENAI_API_KEY")
    assert token.startswith("enc:v1:old:") and "s3cr3t" not in token
    raw = base64.urlsafe_b64decode(token.split(":", 3)[3])
    assert len(raw) == 12 + len(b"s3cr3t-value") + 16  # nonce + ciphertext + tag
    assert ring.open(token, aad=b"OPENAI_API_KEY") == b"s3cr3t-value"
    assert ring.seal(b"same", aad=b"A") != ring.seal(b"same", aad=b"A")  # a fresh nonce each time
    assert Keyring.key_id_of(token) == "old" and Keyring.key_id_of("plain") is None


def test_wrong_associated_data_does_not_open() -> None:
    ring = keyring()
    token = ring.seal(b"s3cr3t-value", aad=b"A_NAME")
    with pytest.raises(Unopenable) as e:
        ring.open(token, aad=b"OTHER_NAME")
    assert e.value.reason == "authentication_failed" and e.value.key_id == "old"
    assert "another name" in str(e.value) and "s3cr3t" not in str(e.value)


def test_unknown_key_id_names_the_remedy() -> None:
    token = keyring("new", new=KEY_NEW).seal(b"v", aad=b"A")
    with pytest.raises(Unopenable) as e:
        keyring().open(token, aad=b"A")
    assert e.value.reason == "unknown_key" and e.value.key_id == "new"
    assert "key id 'new'" in str(e.value) and "add that key to secrets.keys" in str(e.value)


def test_same_id_other_material_fails_authentication() -> None:
    token = keyring("old", old=KEY_NEW).seal(b"v", aad=b"A")
    with pytest.raises(Unopenable) as e:
        keyring().open(token, aad=b"A")
    assert e.value.reason == "authentication_failed"


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("my-plaintext-api-key", "unsealed"),
        ("enc:v1:", "malformed"),
        ("enc:v1:old:%%%not-base64%%%", "malformed"),
        ("enc:v1:old:" + base64.urlsafe_b64encode(b"short").decode(), "malformed"),
    ],
)
def test_not_sealed_or_malformed_never_echoes_the_token(token: str, reason: str) -> None:
    with pytest.raises(Unopenable) as e:
        keyring().open(token, aad=b"A")
    assert e.value.reason == reason
    assert "plaintext-api-key" not in str(e.value) and "not-base64" not in str(e.value)


def test_tampered_ciphertext_fails() -> None:
    ring = keyring()
    token = ring.seal(b"value", aad=b"A")
    raw = bytearray(base64.urlsafe_b64decode(token.split(":", 3)[3]))
    raw[-1] ^= 1
    with pytest.raises(Unopenable):
        ring.open("enc:v1:old:" + base64.urlsafe_b64encode(bytes(raw)).decode(), aad=b"A")


def test_rotation_at_the_keyring_level() -> None:
    both = keyring("new", old=KEY_OLD, new=KEY_NEW)
    assert both.active_key_id == "new" and both.key_ids == ("new", "old")
    old_token = keyring().seal(b"v", aad=b"A")
    assert both.open(old_token, aad=b"A") == b"v"  # old values still open during a rotation
    resealed = both.seal(both.open(old_token, aad=b"A"), aad=b"A")
    assert keyring("new", new=KEY_NEW).open(resealed, aad=b"A") == b"v"  # old key removable


@pytest.mark.parametrize(
    ("active", "keys", "words"),
    [
        ("k1", {}, "at least one key"),
        ("k1", {"k1": b"short"}, "5 bytes"),
        ("k2", {"k1": KEY_OLD}, "not among the keys"),
        ("a:b", {"a:b": KEY_OLD}, "not a key id"),
    ],
)
def test_invalid_keyrings_are_refused(active: str, keys: dict[str, bytes], words: str) -> None:
    with pytest.raises(KeyringInvalid) as e:
        Keyring(active, keys)
    assert words in str(e.value)


def test_repr_shows_ids_only() -> None:
    assert repr(keyring()) == "Keyring(active_key_id='old', key_ids=('old',))"


def test_generated_material_is_32_bytes() -> None:
    a, b = generate_key_material(), generate_key_material()
    assert len(base64.b64decode(a, validate=True)) == 32 and a != b


def test_for_node_uses_the_node_files_keys(tmp_path: Path) -> None:
    cfg = node_cfg(
        tmp_path,
        secrets={
            "active_key_id": "new",
            "keys": [{"id": "old", "material": b64(KEY_OLD)}, {"id": "new", "material": b64(KEY_NEW)}],
        },
    )
    ring = Keyring.for_node(cfg)
    assert ring.active_key_id == "new" and ring.key_ids == ("new", "old")
    assert not (tmp_path / "store" / "keyring.json").exists()
    assert keyring("new", new=KEY_NEW).open(ring.seal(b"v", aad=b"A"), aad=b"A") == b"v"


def test_solo_node_generates_its_keyring_once_and_says_so(tmp_path: Path) -> None:
    cfg = node_cfg(tmp_path)
    with capture_logs() as logs:
        first = Keyring.for_node(cfg)
        second = Keyring.for_node(cfg)
    path = tmp_path / "store" / "keyring.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    generated = [e for e in logs if e["event"] == "secrets_keyring_generated"]
    assert len(generated) == 1 and generated[0]["log_level"] == "warning"
    assert generated[0]["path"] == str(path)
    doc = json.loads(path.read_text())
    material = doc["keys"][0]["material"]
    assert all(material not in json.dumps(e) for e in logs)  # never the key
    assert first.key_ids == second.key_ids == (doc["active_key_id"],)
    assert second.open(first.seal(b"v", aad=b"A"), aad=b"A") == b"v"
    assert list(path.parent.glob(".keyring.json.*")) == []


def test_an_unreadable_local_keyring_is_refused_by_path(tmp_path: Path) -> None:
    cfg = node_cfg(tmp_path)
    path = tmp_path / "store" / "keyring.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    with pytest.raises(KeyringInvalid) as e:
        Keyring.for_node(cfg)
    assert str(path) in str(e.value)


@pytest.mark.parametrize(
    "sections",
    [
        {"stream": {"type": "nats", "url": "nats://x:4222"}},
        {
            "stream": {
                "replicas": 3,
                "cluster": {
                    "name": "c1",
                    "host": "10.0.0.1",
                    "peers": ["nats://10.0.0.2:6222", "nats://10.0.0.3:6222"],
                },
            }
        },
        {
            "node": {"id": "sat", "roles": ["seats"]},
            "store": {"scratch": True},
            "stream": {"leaf": {"urls": ["nats-leaf://hub:7422"]}},
        },
    ],
    ids=["external", "clustered", "leaf"],
)
def test_a_fleet_node_without_keys_is_refused(tmp_path: Path, sections: dict[str, Any]) -> None:
    cfg = node_cfg(tmp_path, **sections)
    with pytest.raises(KeyringMissing) as e:
        Keyring.for_node(cfg)
    msg = str(e.value)
    assert "secrets.keys" in msg and "crewlet secrets keygen" in msg and "every node the same key" in msg
    assert not (tmp_path / "store" / "keyring.json").exists()
    # issue 35: `crewlet validate` refuses the same file with the same text, exit 2, no file written
    node_file = tmp_path / "node.yaml"
    node_file.write_text(
        yaml.safe_dump({**TOKEN, "node": {"id": "n1"}, "store": {"dir": str(tmp_path / "store")}, **sections})
    )
    result = CliRunner().invoke(app, ["validate", "--node", str(node_file)])
    assert result.exit_code == 2, result.output
    assert "secrets.keys" in result.output and msg in " ".join(result.output.split())
    assert not (tmp_path / "store" / "keyring.json").exists()
