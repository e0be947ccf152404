"""``${NAME:-default}`` in node files (FL-9, FL-8): the default stands in when the variable is unset
or empty, exactly as in the shell and Docker Compose; a plain ``${NAME}`` unset stays an error
naming the key; anything else that starts with ``${`` is refused naming the key."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from shared.config import ConfigInvalid, load_node_file, node_config_from_data
from shared.config._env import find_refs, resolve_str
from tests.support.procs import TEST_KEY

REPO = Path(__file__).resolve().parents[2]
BASE = {"CREWLET_API_TOKEN": "t" * 30, "CREWLET_SECRETS_KEY": TEST_KEY}


def _unset(name: str) -> str:
    raise AssertionError(f"on_unset called for {name}")


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("${A:-x}", {}, "x"),
        ("${A:-x}", {"A": ""}, "x"),  # empty counts as unset, as with the shell's :-
        ("${A:-x}", {"A": "y"}, "y"),
        ("${A:-}", {}, ""),
        ("${A:-nats://h:4222,nats://g:4222}", {}, "nats://h:4222,nats://g:4222"),
        ("http://${H:-s3}:${P:-8333}/b", {"P": "9000"}, "http://s3:9000/b"),
        ("${A:-${B}}x", {}, "${B}x"),  # a default is literal up to the first }: not expanded
        ("$A ${A:-1}", {"A": "2"}, "$A 2"),
    ],
)
def test_defaults_resolve_as_in_the_shell(text: str, env: dict[str, str], expected: str) -> None:
    assert resolve_str(text, env, _unset) == expected


def test_plain_references_still_call_on_unset_and_keep_empty_values() -> None:
    seen: list[str] = []
    assert resolve_str("${A}|${B}", {"B": ""}, lambda n: seen.append(n) or "?") == "?|"
    assert seen == ["A"]
    assert find_refs("${A}:${B:-80} ${C:-}") == ["A", "B", "C"]


def _node(api: str) -> dict[str, object]:
    return {
        "node": {"id": "${NODE:-n7}", "roles": ["data"]},
        "api": {
            "host": "127.0.0.1",
            "port": api,
            "auth": {"tokens": [{"id": "a", "token": "${CREWLET_API_TOKEN}"}]},
        },
        "store": {"dir": "${DIR:-/tmp/crewlet-defaults-test}"},
    }


def test_a_node_file_takes_defaults_and_coerces_ports() -> None:
    cfg, issues = node_config_from_data(_node("${PORT:-8123}"), env=BASE, check_files=False)
    assert cfg is not None, issues
    assert cfg.node.id == "n7" and cfg.api.port == 8123 and str(cfg.store.dir) == "/tmp/crewlet-defaults-test"
    cfg, _ = node_config_from_data(
        _node("${PORT:-8123}"), env={**BASE, "PORT": "9001", "NODE": "x"}, check_files=False
    )
    assert cfg is not None and cfg.api.port == 9001 and cfg.node.id == "x"


def test_a_bad_default_is_refused_by_the_schema_naming_the_key() -> None:
    cfg, issues = node_config_from_data(_node("${PORT:-eighty}"), env=BASE, check_files=False)
    assert cfg is None
    assert any(i.path == "api.port" and i.severity == "error" for i in issues), issues


@pytest.mark.parametrize("ref", ["${PORT-8080}", "${ PORT }", "${PORT:=8080}", "${PORT:-8080"])
def test_other_brace_forms_are_refused_naming_the_key(ref: str) -> None:
    cfg, issues = node_config_from_data(_node(ref), env=BASE, check_files=False)
    assert cfg is None
    bad = [i for i in issues if i.path == "api.port" and i.type == "invalid"]
    assert bad and "${NAME:-default}" in bad[0].message, issues


def test_an_unset_reference_without_default_is_still_an_error_naming_the_key() -> None:
    data = _node("8080")
    data["store"] = {"dir": "${UNSET_STORE_DIR_FOR_TEST}"}
    cfg, issues = node_config_from_data(data, env=BASE, check_files=False)
    assert cfg is None
    assert [(i.path, i.type) for i in issues if i.severity == "error"][:1] == [("store.dir", "missing")]


DEPLOY_VARS = (
    "CREWLET_NATS_URL",
    "CREWLET_S3_ENDPOINT",
    "CREWLET_API_HOST",
    "CREWLET_API_PORT",
    "CREWLET_STORE_DIR",
)


@pytest.mark.parametrize("name", ["node.yaml", "satellite.yaml"])
def test_deploy_node_files_default_to_compose_and_override(name: str) -> None:
    """The compose values are the defaults (compose sets none of these variables); every host,
    port and dir can be overridden (the compose rehearsal, deploy/k8s/)."""
    path = REPO / "deploy" / "crewlet" / name
    text = path.read_text()
    for var in DEPLOY_VARS:
        assert f"${{{var}:-" in text, f"{name} does not let {var} override"
    env = {**BASE, "CREWLET_NODE_ID": "node-1"}
    cfg, _ = load_node_file(path, env=env)
    assert cfg.stream.url == "nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222"
    assert cfg.store.objects.endpoint_url == "http://s3:8333" and cfg.store.objects.bucket == "crewlet-files"
    assert (cfg.api.host, cfg.api.port, str(cfg.store.dir)) == ("0.0.0.0", 8080, "/var/lib/crewlet")
    over = {
        "CREWLET_NATS_URL": "nats://127.0.0.1:1,nats://127.0.0.1:2",
        "CREWLET_S3_ENDPOINT": "http://127.0.0.1:3",
        "CREWLET_API_HOST": "127.0.0.1",
        "CREWLET_API_PORT": "18080",
        "CREWLET_STORE_DIR": "/tmp/crewlet-rehearsal-x",
    }
    cfg, _ = load_node_file(path, env={**env, **over})
    assert (
        cfg.stream.url == over["CREWLET_NATS_URL"]
        and cfg.store.objects.endpoint_url == over["CREWLET_S3_ENDPOINT"]
    )
    assert (cfg.api.host, cfg.api.port, str(cfg.store.dir)) == (
        "127.0.0.1",
        18080,
        "/tmp/crewlet-rehearsal-x",
    )


def test_an_unset_token_in_a_deploy_file_is_still_refused() -> None:
    with pytest.raises(ConfigInvalid) as e:
        load_node_file(
            REPO / "deploy" / "crewlet" / "node.yaml",
            env={"CREWLET_NODE_ID": "node-1", "CREWLET_SECRETS_KEY": TEST_KEY},
        )
    assert "api.auth.tokens[0].token" in str(e.value) and "CREWLET_API_TOKEN" in str(e.value)


def test_crewlet_validate_accepts_a_default(tmp_path: Path) -> None:
    node = tmp_path / "crewlet.yaml"
    node.write_text(
        "node: {roles: [data]}\napi: {port: '${UNSET_PORT_FOR_TEST:-8099}'}\nstore: {dir: "
        + str(tmp_path / "s")
        + "}\n"
    )
    out = subprocess.run(
        [str(REPO / ".venv" / "bin" / "crewlet"), "validate", "--node", str(node)],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)},
    )
    assert out.returncode == 0, out.stderr
