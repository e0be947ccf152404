"""``crewlet secrets`` against a real node process, and the ``/secrets`` routes on the wire (FL-151, CO-27,
CO-28, CO-40); a fleet node without a keyring refuses to boot."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.support.procs import TOKEN, VENV_BIN, NatsServer, Node, free_port, node_file

VALUE = "sk-e2e-7a1b2c3d4e5f-do-not-log"
READER = "reader-token-0123456789-abcdefgh"


def cli(
    *args: str, url: str, token: str | None = TOKEN, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "CREWLET_URL": url}
    if token is not None:
        env["CREWLET_API_TOKEN"] = token
    return subprocess.run(
        [str(VENV_BIN / "crewlet"), "secrets", *args],
        input=stdin if stdin is not None else "",
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def start(start_node: Callable[..., Node], tmp_path: Path, company: Path) -> Node:
    port = free_port()
    tokens = [
        {"id": "test", "token": "${CREWLET_API_TOKEN}"},
        {"id": "reader", "token": READER, "grants": ["secrets:read"]},
    ]
    path = node_file(tmp_path / "n", node_id="n1", port=port, api={"auth": {"tokens": tokens}})
    node = start_node("node", "--node", str(path), "--company", str(company), name="n", port=port)
    node.wait_ready()
    return node


def test_cli_set_list_get_unset_through_a_live_node(
    start_node: Callable[..., Node], tmp_path: Path, example_company: Path
) -> None:
    node = start(start_node, tmp_path, example_company)
    out = cli("set", "OPENAI_API_KEY", url=node.url, stdin=VALUE + "\n")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "set OPENAI_API_KEY (key test)" in out.stdout and VALUE not in out.stdout + out.stderr

    out = cli("list", url=node.url)
    assert out.returncode == 0, out.stderr
    assert "OPENAI_API_KEY" in out.stdout and "test" in out.stdout and VALUE not in out.stdout

    out = cli("get", "OPENAI_API_KEY", url=node.url)
    assert out.returncode == 0 and "OPENAI_API_KEY: key test" in out.stdout and VALUE not in out.stdout
    out = cli("get", "OPENAI_API_KEY", "--reveal", url=node.url)
    assert out.returncode == 0 and out.stdout == VALUE + "\n"  # one trailing newline was stripped on set

    out = cli("rekey", url=node.url)
    assert out.returncode == 0 and "re-sealed 0 value(s) under key test; 1 already current" in out.stdout

    out = cli("unset", "OPENAI_API_KEY", url=node.url)
    assert out.returncode == 0 and "unset OPENAI_API_KEY" in out.stdout
    out = cli("get", "OPENAI_API_KEY", url=node.url)
    assert out.returncode == 2 and "unknown_secret" in out.stderr
    assert "OPENAI_API_KEY" not in cli("list", url=node.url).stdout
    assert VALUE not in node.output()  # never in the node's log


def test_cli_refusals_and_exit_codes(
    start_node: Callable[..., Node], tmp_path: Path, example_company: Path
) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    out = cli("set", "bad-name", url=dead, stdin="v")  # refused before any request: exit 2, not 1
    assert out.returncode == 2 and "^[A-Z][A-Z0-9_]*$" in out.stderr
    out = cli("list", url=dead, token=None)
    assert out.returncode == 2 and "no API token" in out.stderr
    out = cli("list", url=dead)
    assert out.returncode == 1 and f"cannot reach {dead}" in out.stderr
    out = cli("keygen", "--id", "k2", url=dead)
    assert out.returncode == 0
    material = out.stdout.splitlines()[0]
    assert (
        len(material) == 44 and "active_key_id: k2" in out.stdout and "${CREWLET_SECRETS_KEY}" in out.stdout
    )

    node = start(start_node, tmp_path, example_company)
    out = cli("set", "A_KEY", url=node.url, token=READER, stdin="v")
    assert out.returncode == 2 and "refused the token (403" in out.stderr and "secrets:write" in out.stderr
    out = cli("list", url=node.url, token=READER)
    assert out.returncode == 0


def test_routes_on_the_wire(start_node: Callable[..., Node], tmp_path: Path, example_company: Path) -> None:
    node = start(start_node, tmp_path, example_company)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=node.url, timeout=10) as c:
        r = c.put("/secrets/PLAIN_KEY", content=VALUE, headers={**auth, "content-type": "text/plain"})
        assert r.status_code == 200 and r.json()["name"] == "PLAIN_KEY" and r.json()["key_id"] == "test"
        assert VALUE not in r.text
        for ctype in (None, "application/x-www-form-urlencoded", "application/xml"):  # never stored as text
            r = c.put(
                "/secrets/FORM_KEY",
                content=b'{"value": "sk-abc"}',
                headers={**auth, **({"content-type": ctype} if ctype else {})},
            )
            assert r.status_code == 415 and r.json()["detail"]["field"] == "Content-Type", r.text
        assert c.get("/secrets/FORM_KEY", headers=auth).status_code == 404
        r = c.put("/secrets/JSON_KEY", json={"value": "v2"}, headers=auth)
        assert r.status_code == 200
        r = c.put("/secrets/JSON_KEY", json={"valu": "v2"}, headers=auth)
        assert r.status_code == 400 and r.json()["error"] == "invalid_request"
        r = c.put("/secrets/bad-name", json={"value": "v"}, headers=auth)
        assert r.status_code == 422 and r.json()["error"] == "invalid_secret_name"
        assert "^[A-Z][A-Z0-9_]*$" in r.json()["detail"]
        r = c.put(
            "/secrets/BIG", content="x" * (64 * 1024 + 1), headers={**auth, "content-type": "text/plain"}
        )
        assert r.status_code == 413 and r.json()["detail"]["limit"] == 65536
        listed = c.get("/secrets", headers=auth)
        assert listed.status_code == 200 and VALUE not in listed.text
        assert [s["name"] for s in listed.json()["secrets"]] == ["JSON_KEY", "PLAIN_KEY"]
        meta = c.get("/secrets/PLAIN_KEY", headers=auth)
        assert (
            meta.status_code == 200
            and "value" not in meta.json()
            and meta.json()["updated_by"] == "operator:test"
        )
        shown = c.get("/secrets/PLAIN_KEY", params={"reveal": "true"}, headers=auth)
        assert shown.json()["value"] == VALUE
        assert c.get("/secrets/NOPE", headers=auth).json()["error"] == "unknown_secret"
        assert c.delete("/secrets/NOPE", headers=auth).status_code == 404
        assert c.delete("/secrets/JSON_KEY", headers=auth).status_code == 204
        assert c.get("/secrets").status_code == 401
        assert c.get("/secrets", headers={"Authorization": f"Bearer {READER}"}).status_code == 200
        r = c.post("/secrets/rekey", headers={"Authorization": f"Bearer {READER}"})
        assert r.status_code == 403
        r = c.post("/secrets/rekey", headers=auth)
        assert r.status_code == 200 and r.json() == {
            "active_key_id": "test",
            "resealed": [],
            "current": ["PLAIN_KEY"],
            "unopenable": [],
        }
    assert VALUE not in node.output()


def test_a_node_on_an_external_stream_without_keys_refuses_to_boot(
    nats_server: NatsServer, start_node: Callable[..., Node], tmp_path: Path, example_company: Path
) -> None:
    port = free_port()
    path = node_file(
        tmp_path / "n",
        node_id="ext",
        port=port,
        stream={"type": "nats", "url": nats_server.url},
        secrets=None,
    )
    node = start_node("node", "--node", str(path), "--company", str(example_company), name="n", port=port)
    code = node.wait(30)
    assert code == 2, f"exit {code}: {node.output()[-3000:]}"
    failed = [e for e in node.events() if e.get("event") == "node_boot_failed"]
    assert failed and failed[0]["error_type"] == "KeyringMissing"
    assert "secrets.keys" in failed[0]["error"] and "crewlet secrets keygen" in failed[0]["error"]
