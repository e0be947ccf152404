"""``crewlet validate``: exit 0 when valid, 2 with one ``file: path: message`` line per error (FL-158, CO-1)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.support.procs import REPO, SHARED, VENV_BIN

UPSTREAM = SHARED / "data" / "upstream-examples"


def crewlet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENV_BIN / "crewlet"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin"},
    )


def test_example_company_and_node_file_are_valid() -> None:
    out = crewlet("validate", "--node", "examples/crewlet.yaml", "--company", "examples/company.yaml")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "valid" in out.stdout


def test_the_embedded_fleet_examples_are_valid() -> None:
    """``examples/fleet``: three clustered members with leaf listeners and a leaf satellite (FL-4, FL-144)."""
    env = {"PATH": "/usr/bin:/bin", "CREWLET_API_TOKEN": "t" * 32, "CREWLET_SECRETS_KEY": "A" * 43 + "="}
    for name in ("member-a", "member-b", "member-c", "satellite"):
        out = subprocess.run(
            [str(VENV_BIN / "crewlet"), "validate", "--node", f"examples/fleet/{name}.yaml"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            env=env,
        )
        assert out.returncode == 0 and "warning" not in out.stdout + out.stderr, (
            name,
            out.stdout + out.stderr,
        )


def test_each_error_is_one_line_naming_file_and_path(tmp_path: Path) -> None:
    bad = tmp_path / "company.yaml"
    text = (REPO / "examples" / "company.yaml").read_text()
    bad.write_text(text.replace("    handle: dev\n", "    handle: dev\n        backstroy: typo\n", 1))
    node = tmp_path / "crewlet.yaml"
    node.write_text("node: {id: '-bad', roles: [seat]}\nstream: {replicas: 9}\n")
    out = crewlet("validate", "--node", str(node), "--company", str(bad))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert "Traceback" not in out.stderr
    assert any(line.startswith(f"{node}: node.id: ") for line in lines)
    assert any(line.startswith(f"{node}: node.roles[0]: ") for line in lines)
    assert any(line.startswith(f"{node}: stream.replicas: ") for line in lines)
    assert any(line.startswith(f"{bad}: ") and "backstroy" in line for line in lines)
    # the same input gives the same lines in the same order
    assert crewlet("validate", "--node", str(node), "--company", str(bad)).stderr == out.stderr


def test_json_output_is_parseable_and_still_exits_2(tmp_path: Path) -> None:
    bad = tmp_path / "c.yaml"
    bad.write_text("name: X\nproviders: {llm: {default: {type: offline, script: s.yaml}}}\nbogus: 1\n")
    out = crewlet("validate", "--company", str(bad), "--json")
    assert out.returncode == 2
    payload = json.loads(out.stdout)
    assert payload["valid"] is False and payload["tier"] == "company"
    assert {"path": "bogus", "type": "unknown_field"}.items() <= payload["errors"][0].items() or any(
        e["path"] == "bogus" and e["type"] == "unknown_field" for e in payload["errors"]
    )


def test_upstream_documents_fail_by_name_without_a_traceback() -> None:
    out = crewlet("validate", str(UPSTREAM / "fixture.company.yaml"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "extensions" in out.stderr and "units[0].knowledge" in out.stderr
    out = crewlet("validate", str(UPSTREAM / "minimal.company.yaml"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "providers" in out.stderr
    out = crewlet("validate", "--compat", str(UPSTREAM / "fixture.company.yaml"))
    assert out.returncode == 0, out.stderr
    out = crewlet("validate", "--node", str(UPSTREAM / "node.config.yaml"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    for key in ("debug", "providers"):
        assert f"node.config.yaml: {key}: unknown key" in out.stderr


def test_missing_empty_and_broken_files(tmp_path: Path) -> None:
    out = crewlet("validate", "--node", str(tmp_path / "nope.yaml"))
    assert out.returncode == 2 and "nope.yaml: (document): no such file" in out.stderr
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    out = crewlet("validate", "--company", str(empty))
    assert out.returncode == 2 and "file is empty" in out.stderr
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n")
    out = crewlet("validate", "--company", str(broken))
    assert out.returncode == 2 and "YAML syntax error: line" in out.stderr


def test_node_command_refuses_a_bad_file_with_exit_2(tmp_path: Path) -> None:
    node = tmp_path / "crewlet.yaml"
    node.write_text(
        "node: {roles: [ingress]}\nstream: {type: nats, url: 'nats://127.0.0.1:1'}\n"
        "api: {auth: {tokens: [{id: a, token: '${UNSET_TOKEN_VAR}'}]}}\n"
    )
    out = crewlet("node", "--node", str(node))
    assert out.returncode == 2
    assert f"{node}: node.roles: ingress reads" in out.stderr
    assert f"{node}: api.auth.tokens[0].token: ${{UNSET_TOKEN_VAR}} is not set" in out.stderr
    assert "Traceback" not in out.stderr


def test_duplicate_keys_and_malformed_references_are_named(tmp_path: Path) -> None:
    node = tmp_path / "crewlet.yaml"
    node.write_text("node: {id: a}\nnode: {id: b}\n")
    out = crewlet("validate", "--node", str(node))
    assert out.returncode == 2 and "duplicate key 'node'" in out.stderr
    node.write_text("api: {auth: {tokens: [{id: a, token: '${CREWLET_API_TOKEN-default}'}]}}\n")
    out = crewlet("validate", "--node", str(node))
    assert (
        out.returncode == 2 and "api.auth.tokens[0].token: a ${...} reference must be ${NAME}" in out.stderr
    )


def test_a_missing_offline_script_is_named(tmp_path: Path) -> None:
    company = tmp_path / "company.yaml"
    company.write_text((REPO / "examples" / "company.yaml").read_text())  # its script is not beside it
    out = crewlet("validate", "--company", str(company))
    assert out.returncode == 2 and "offline-script.yaml" in out.stderr
