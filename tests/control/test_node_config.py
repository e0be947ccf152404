"""The control plane on one real node process (embedded broker): seed, restart, offline import,
an unsealed pointer, and a turn pinning the company it started with (CO-4, FL-107, FL-109, FL-116)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.main_job.support import Broker, wait_for
from tests.support.procs import REPO, TOKEN, VENV_BIN, Node

H = {"Authorization": f"Bearer {TOKEN}"}


def example() -> dict[str, Any]:
    data = yaml.safe_load((REPO / "examples" / "company.yaml").read_text())
    data["providers"]["llm"]["default"]["script"] = str((REPO / "examples" / "offline-script.yaml").resolve())
    return dict(data)


def get_config(node: Node) -> dict[str, Any]:
    r = node.get("/config")
    assert r.status_code == 200, r.text
    return dict(r.json())


def put(node: Node, doc: dict[str, Any], summary: str) -> dict[str, Any]:
    r = httpx.put(node.url + "/config", json=doc, headers={**H, "X-Summary": summary}, timeout=30)
    assert r.status_code == 201, r.text
    return dict(r.json())


def test_restart_keeps_what_it_served_and_ignores_an_edited_seed(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    """CO-4, FL-109: the --company file is a seed; after a PUT the restarted node serves the PUT."""
    seed = tmp_path / "company.yaml"
    seed.write_text(yaml.safe_dump(example()))
    data = tmp_path / "data"
    node = start_node("run", "--data-dir", str(data), "--company", str(seed), name="n1")
    node.wait_ready(60)
    first = get_config(node)
    assert first["source"] == "seed" and first["epoch"] >= 1
    doc = example()
    doc["mission"] = "Served before the restart"
    done = put(node, doc, "new mission")
    assert done["applied_here"] is True and done["epoch"] > first["epoch"]
    assert node.stop() == 0
    edited = example()
    edited["mission"] = "An edited seed nobody activated"
    seed.write_text(yaml.safe_dump(edited))
    again = start_node("run", "--data-dir", str(data), "--company", str(seed), name="n2", port=node.port)
    again.wait_ready(60)
    now = get_config(again)
    assert (
        now["revision_id"] == done["revision_id"]
        and now["document"]["mission"] == "Served before the restart"
    )
    assert [e for e in again.events() if e.get("event") == "company_seed_ignored"]
    assert again.get("/health", token=None).json()["applied_epoch"] == now["epoch"]


def test_offline_import_moves_the_pointer_at_next_start(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    """FL-109: ``crewlet config import --offline`` against a stopped node; its next start publishes it."""
    data = tmp_path / "data"
    node = start_node("run", "--data-dir", str(data), name="n1")
    node.wait_ready(60)
    before = get_config(node)
    assert node.stop() == 0
    doc = example()
    doc["mission"] = "Imported while stopped"
    path = tmp_path / "offline.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = subprocess.run(
        [
            str(VENV_BIN / "crewlet"),
            "config",
            "import",
            str(path),
            "--offline",
            "--data-dir",
            str(data / "node-0"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "next start" in out.stdout
    again = start_node("run", "--data-dir", str(data), name="n2", port=node.port)
    again.wait_ready(60)
    now = get_config(again)
    assert now["source"] == "offline" and now["document"]["mission"] == "Imported while stopped"
    assert now["epoch"] > before["epoch"]


def test_an_unsealed_pointer_is_refused_and_never_kept(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    """FL-107: a pointer whose body is stored unsealed: apply status ``error`` with the remedy, the
    node keeps its epoch (a single node: ``isolated``, still ready), the body never enters history."""
    data = tmp_path / "data"
    node = start_node("run", "--data-dir", str(data), name="n1")
    node.wait_ready(60)
    before = get_config(node)
    broker = Broker(data / "node-0")
    record = {
        "revision_id": "r-plaintext",
        "payload": example(),
        "activated_at": int(time.time() * 1000) + 60_000,
    }

    async def write(nc: Any) -> None:
        kv = await nc.jetstream().key_value("crewlet_config")
        await kv.put("activation", json.dumps(record).encode())

    broker._run(write)

    def errored() -> dict[str, Any] | None:
        h = node.get("/health", token=None).json()
        return h if h["posture"] == "isolated" else None

    wait_for("the node goes isolated", errored, timeout=20)
    failures = [e for e in node.events() if e.get("event") == "config_apply_failed"]
    assert (
        failures
        and "not sealed" in failures[-1]["error"]
        and "crewlet config import" in failures[-1]["error"]
    )
    assert node.get("/ready", token=None).status_code == 200  # isolated keeps serving
    assert node.get("/health", token=None).json()["applied_epoch"] == before["epoch"]
    revisions = node.get("/config/revisions").json()["revisions"]
    assert "r-plaintext" not in {r["revision_id"] for r in revisions}
    # a sealed activation through the API brings it back
    doc = example()
    doc["mission"] = "Recovered"
    done = put(node, doc, "recover")
    assert done["applied_here"] is True
    assert node.get("/health", token=None).json()["posture"] == "serve"


def test_a_running_turn_keeps_the_company_it_started_with(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    """FL-116: a turn started before an apply finishes under the old epoch; the next one runs on the new."""
    from tests.fleet.llm import FleetLLM

    llm = FleetLLM()
    try:
        doc = example()
        doc["providers"]["llm"] = {"default": llm.entry()}
        seed = tmp_path / "company.yaml"
        seed.write_text(yaml.safe_dump(doc))
        node = start_node("run", "--data-dir", str(tmp_path / "data"), "--company", str(seed), name="n1")
        node.wait_ready(60)
        epoch0 = get_config(node)["epoch"]
        llm.delays["dev"] = 3.0
        r = httpx.post(node.url + "/seats/dev/messages", json={"text": "slow one"}, headers=H, timeout=10)
        assert r.status_code == 202, r.text
        slow = r.json()["message_id"]
        llm.wait_first_round("dev", 0)
        doc["mission"] = "A mission the running turn never saw"
        epoch1 = put(node, doc, "mid-turn apply")["epoch"]
        llm.delays.pop("dev")
        r = httpx.post(node.url + "/seats/dev/messages", json={"text": "after"}, headers=H, timeout=10)
        fast = r.json()["message_id"]

        def turn_of(message_id: str) -> dict[str, Any] | None:
            m = node.get(f"/messages/{message_id}").json()
            if m.get("status") != "answered":
                return None
            return dict(node.get(f"/turns/{m['turn_id']}").json())

        old = wait_for("the slow turn", lambda: turn_of(slow), timeout=30)
        new = wait_for("the next turn", lambda: turn_of(fast), timeout=30)
        assert old["record"]["epoch"] == epoch0 and new["record"]["epoch"] == epoch1
        first_prompts = [q.text for q in llm.requests("dev")]
        assert first_prompts  # both turns reached the model
    finally:
        llm.stop()


def test_config_routes_need_their_grants(start_node: Callable[..., Node], tmp_path: Path) -> None:
    node = start_node("run", "--data-dir", str(tmp_path / "data"), name="n1")
    node.wait_ready(60)
    for method, path in (("GET", "/config"), ("PUT", "/config"), ("GET", "/config/revisions")):
        r = httpx.request(method, node.url + path, timeout=10)
        assert r.status_code == 401, (method, path, r.text)


def test_unconfigured_node_takes_its_first_revision_live(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    """FL-127, CO-4: a node with no company is 503 ``unconfigured`` until ``PUT /config``; then its
    seats are claimed and answer, without a restart."""
    from tests.support.procs import free_port, node_file

    port = free_port()
    cfg = node_file(tmp_path / "n", node_id="fresh", port=port)
    node = start_node("node", "--node", str(cfg), name="n", port=port)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            r = node.get("/ready", token=None)
            if r.json().get("reason") == "unconfigured" and r.json().get("detail") == "no active company":
                break
        time.sleep(0.2)
    assert r.status_code == 503 and r.json()["reason"] == "unconfigured"
    assert node.get("/config").json()["error"] == "no_active_revision"
    msg = httpx.post(node.url + "/seats/dev/messages", json={"text": "hi"}, headers=H, timeout=10)
    assert msg.status_code == 503 and msg.json()["error"] == "no_active_revision"
    done = put(node, example(), "first revision")
    assert done["applied_here"] is True
    node.wait_ready(30)
    wait_for("seats claimed", lambda: node.get("/health", token=None).json()["seats"]["held"], timeout=30)
    r = httpx.post(node.url + "/seats/triage/messages", json={"text": "hello"}, headers=H, timeout=10)
    assert r.status_code == 202, r.text
    wait_for(
        "the message answered",
        lambda: node.get(f"/messages/{r.json()['message_id']}").json().get("status") == "answered",
        timeout=30,
    )


def test_edit_one_entity_and_revert(start_node: Callable[..., Node], tmp_path: Path) -> None:
    """CO-39: replace one role; the whole document is re-validated; unknown entities are 404; revert."""
    node = start_node("run", "--data-dir", str(tmp_path / "data"), name="n1")
    node.wait_ready(60)
    first = get_config(node)
    role = next(r for u in first["document"]["units"] for r in u.get("roles", []) if r.get("handle") == "dev")
    role = {**role, "goal": "Ship the lantern on Fridays"}
    r = httpx.put(
        node.url + "/config/roles/dev", json=role, headers={**H, "X-Summary": "dev goal"}, timeout=30
    )
    assert r.status_code == 201, r.text
    now = get_config(node)
    dev = next(r for u in now["document"]["units"] for r in u.get("roles", []) if r.get("handle") == "dev")
    assert dev["goal"] == "Ship the lantern on Fridays" and now["parent_revision_id"] == first["revision_id"]
    missing = httpx.put(node.url + "/config/roles/nobody", json=role, headers=H, timeout=30)
    assert missing.status_code == 404 and missing.json()["error"] == "no_such_entity"
    broken = {**role, "lead": "no-such-seat"}
    r = httpx.put(node.url + "/config/roles/dev", json=broken, headers=H, timeout=30)
    assert r.status_code == 422 and any("lead" in i["path"] for i in r.json()["issues"])
    r = httpx.post(node.url + f"/config/revisions/{first['revision_id']}/revert", headers=H, timeout=30)
    assert r.status_code == 201, r.text
    reverted = get_config(node)
    assert reverted["document"] == first["document"] and reverted["epoch"] > now["epoch"]
    assert reverted["summary"] == f"revert to {first['revision_id']}"


def test_bad_input_found_by_a_new_user(start_node: Callable[..., Node], tmp_path: Path) -> None:
    """Refused before the pointer moves, by path: a missing offline rules file, an exported ``***``
    sent back; accepted: YAML without a content type, a compat document with no provider (its
    seats stopped, the node serving); a secret in a prompt never reaches the turn record."""
    node = start_node("run", "--data-dir", str(tmp_path / "data"), name="n1")
    node.wait_ready(60)
    before = get_config(node)
    doc = example()
    doc["providers"]["llm"]["default"]["script"] = "./nope-script.yaml"
    r = httpx.put(node.url + "/config", json=doc, headers={**H, "X-Summary": "x"}, timeout=30)
    assert r.status_code == 422 and any(
        i["path"] == "providers.llm.default.script" for i in r.json()["issues"]
    )
    doc = example()
    doc["providers"]["llm"]["claude"]["api_keys"] = ["***"]
    r = httpx.put(node.url + "/config", json=doc, headers={**H, "X-Summary": "x"}, timeout=30)
    assert r.status_code == 422 and r.json()["issues"][0]["path"] == "providers.llm.claude.api_keys"
    r = httpx.put(node.url + "/config", json=example(), headers={**H, "X-Summary": "a\x01b"}, timeout=30)
    assert r.status_code == 422 and r.json()["error"] == "invalid_summary"
    assert get_config(node)["epoch"] == before["epoch"]  # nothing moved
    r = httpx.put(
        node.url + "/config",
        content=yaml.safe_dump(example()),
        headers={**H, "X-Summary": "yaml"},
        timeout=30,
    )
    assert r.status_code == 201, r.text
    minimal = REPO.parent / "shared" / "data" / "upstream-examples" / "minimal.company.yaml"
    r = httpx.put(
        node.url + "/config",
        params={"compat": "true"},
        content=minimal.read_bytes(),
        headers={**H, "X-Summary": "upstream minimal", "Content-Type": "application/yaml"},
        timeout=30,
    )
    assert r.status_code == 201 and r.json()["applied_here"] is True, r.text
    assert node.get("/health", token=None).json()["posture"] == "serve"
    # a secret resolved into a goal reaches the model, never the turn record
    value = "promptleak-" + str(time.time_ns())
    out = subprocess.run(
        [str(VENV_BIN / "crewlet"), "secrets", "set", "PROMPT_SECRET"],
        input=value,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "CREWLET_URL": node.url, "CREWLET_API_TOKEN": TOKEN},
        timeout=30,
    )
    assert out.returncode == 0, out.stderr
    doc = example()
    triage = next(r for u in doc["units"] for r in u.get("roles", []) if r.get("handle") == "triage")
    triage["goal"] = "Triage. Internal code ${PROMPT_SECRET}"
    put(node, doc, "a goal with a secret")
    r = httpx.post(node.url + "/seats/triage/messages", json={"text": "hello"}, headers=H, timeout=10)
    message = r.json()["message_id"]
    turn_id = wait_for("answered", lambda: node.get(f"/messages/{message}").json().get("turn_id"), timeout=30)
    wait_for("recorded", lambda: node.get(f"/turns/{turn_id}").json().get("outcome") != "running", timeout=30)
    record = node.get(f"/turns/{turn_id}").text
    assert value not in record and "[redacted]" in record
    assert value not in node.output()


def test_offline_import_finds_the_store_and_refuses_a_running_node(
    start_node: Callable[..., Node], tmp_path: Path
) -> None:
    """FL-109: ``--data-dir`` of ``crewlet run`` is accepted (its one node store); a store a running
    node holds is refused, so the import is never silently lost."""
    data = tmp_path / "data"
    node = start_node("run", "--data-dir", str(data), name="n1")
    node.wait_ready(60)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(example()))

    def offline() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(VENV_BIN / "crewlet"), "config", "import", str(path), "--offline", "--data-dir", str(data)],
            capture_output=True,
            text=True,
            timeout=60,
        )

    out = offline()
    assert out.returncode == 2 and "held by a running node" in out.stderr, out.stdout + out.stderr
    assert not (data / "node-0" / "control" / "pending.json").exists()
    assert node.stop() == 0
    out = offline()
    assert out.returncode == 0 and "node-0" in out.stdout, out.stdout + out.stderr
    pending = json.loads((data / "node-0" / "control" / "pending.json").read_text())
    assert pending["revision"]["parent_revision_id"]  # the revision it served before
