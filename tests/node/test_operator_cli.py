"""The operator commands against one running node (CO-8, CO-28, FL-40, issue 15): ``crewlet send``,
``crewlet turns``/``turn``, ``crewlet work list|show``, and ``crewlet migrate`` on a local store (FL-145).

One node (``crewlet run``: offline provider, example company) serves most of the module; a second
(``scripted``) puts ``dev`` on a scripted model that can hold a turn or refuse it, for the
``--wait`` outcomes the offline provider cannot produce. Commands run in-process through Typer's
runner with ``CREWLET_URL``/``CREWLET_API_TOKEN`` set, and a few as a real ``crewlet`` process.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from crewlet.cli import app
from tests.main_job.llm import OpenAIRouted
from tests.main_job.wire import OPENAI
from tests.support.llm_servers import Reply, is_review
from tests.support.procs import REPO, TOKEN, VENV_BIN, Node, free_port, write_yaml


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    d = tmp_path_factory.mktemp("opcli")
    port = free_port()
    n = Node(["run", "--data-dir", str(d / "data"), "--port", str(port)], dir=d, port=port)
    try:
        n.wait_ready(60)
        yield n
    finally:
        n.stop()


@dataclass
class Ran:
    """What one command printed and its exit code."""

    returncode: int
    stdout: str
    stderr: str


def crewlet(*args: str, url: str | None = None, token: str = TOKEN, process: bool = False) -> Ran:
    """Run ``crewlet ARGS`` with ``CREWLET_URL``/``CREWLET_API_TOKEN`` set: in-process through Typer's
    runner (fast), or with ``process`` as a real ``crewlet`` process (the console script)."""
    env = {"CREWLET_API_TOKEN": token, "CREWLET_URL": url or "", "COLUMNS": "200"}
    if process:
        done = subprocess.run(
            [str(VENV_BIN / "crewlet"), *args],
            capture_output=True,
            text=True,
            timeout=90,
            cwd=REPO,
            env={"PATH": "/usr/bin:/bin", **{k: v for k, v in env.items() if v}},
        )
        return Ran(done.returncode, done.stdout, done.stderr)
    result = CliRunner().invoke(app, list(args), env={k: (v or None) for k, v in env.items()})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Ran(result.exit_code, result.stdout, result.stderr)


@pytest.fixture(scope="module")
def answered(node: Node) -> dict[str, Any]:
    """One message sent with ``--wait --json``: the final ``GET /messages/{id}`` record."""
    out = crewlet(
        "send", "triage", "The lantern CLI crashes when the config is empty", "--wait", "--json", url=node.url
    )
    assert out.returncode == 0, out.stdout + out.stderr
    record: dict[str, Any] = json.loads(out.stdout)
    return record


def test_send_wait_prints_the_seats_reply(node: Node, answered: dict[str, Any]) -> None:
    """CO-28: ``crewlet send triage "..." --wait`` prints the reply (the offline provider answers)."""
    assert answered["status"] == "answered" and answered["seat"] == "triage" and answered["turn_id"]
    out = crewlet(
        "send", "triage", "Docs for the export command are outdated", "--wait", url=node.url, process=True
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().startswith("[offline]"), out.stdout
    assert "Traceback" not in out.stderr


def test_send_without_wait_prints_the_id_and_task_wait_reports_the_turn(node: Node) -> None:
    out = crewlet("send", "triage", "just queue it", "--json", url=node.url)
    assert out.returncode == 0, out.stderr
    sent = json.loads(out.stdout)
    assert set(sent) >= {"message_id", "event_id", "trace_id"}
    out = crewlet("send", "triage", "a task for you", "--task", "--wait", url=node.url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.startswith("task done: turn ") and " ended " in out.stdout


def test_send_failures_are_one_clear_line_and_non_zero(node: Node) -> None:
    out = crewlet("send", "nobody", "hello", url=node.url)
    assert out.returncode == 2 and "unknown_seat" in out.stderr and "'nobody'" in out.stderr, out.stderr
    out = crewlet("send", "founder", "hello", url=node.url)  # a human seat has no inbox
    assert out.returncode == 2 and "human_seat_has_no_inbox" in out.stderr, out.stderr
    out = crewlet("send", "triage", "hello", "--work-item", "SUP-999999", url=node.url)
    assert out.returncode == 2 and "unknown_work_item" in out.stderr, out.stderr
    out = crewlet("send", "triage", "hello", url=node.url, token="wrong-token-wrong-token-wrong-x")
    assert out.returncode == 2 and "401" in out.stderr, out.stderr
    stopped = f"http://127.0.0.1:{free_port()}"
    out = crewlet("send", "triage", "hello", "--wait", url=stopped, process=True)
    assert out.returncode == 1 and f"cannot reach the node at {stopped}" in out.stderr, out.stderr
    out = crewlet("send", "triage", "hello", url=node.url, token="")
    assert out.returncode == 2 and "CREWLET_API_TOKEN" in out.stderr
    for o in (out,):
        assert "Traceback" not in o.stderr + o.stdout


@dataclass
class Scripted:
    """A second node whose ``dev`` seat runs on a scripted model: a message containing ``HOLD`` is
    held at the model until ``release`` is set; one containing ``REFUSE`` is answered 400 (a
    provider refusal is not retried: the turn fails)."""

    node: Node
    release: threading.Event


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scripted]:
    release = threading.Event()

    def respond(seat: str, body: Any) -> Reply:
        text = json.dumps(body)
        if is_review(body):
            return OPENAI.tools(("submit_review", {"decision": "done", "notes": "fine"}))
        if "REFUSE" in text:
            return Reply({"error": {"message": "this model refuses"}}, status=400)
        if "HOLD" in text:
            release.wait(30)
        return OPENAI.tools(("submit_work", {"outcome": "delivered", "summary": "scripted answer"}))

    d = tmp_path_factory.mktemp("opcli-scripted")
    with OpenAIRouted(respond=respond) as llm:
        doc = yaml.safe_load((REPO / "examples" / "company.yaml").read_text())
        doc["providers"]["llm"]["local"] = OPENAI.entry(llm, timeout_seconds=40.0)
        doc["providers"]["llm"]["default"]["script"] = str(REPO / "examples" / "offline-script.yaml")
        for unit in doc["units"]:
            for role in unit["roles"]:
                if role["handle"] == "dev":
                    role["llm"] = "local"
        company = write_yaml(d / "company.yaml", doc)
        port = free_port()
        n = Node(
            ["run", "--data-dir", str(d / "data"), "--port", str(port), "--company", str(company)],
            dir=d,
            port=port,
        )
        try:
            n.wait_ready(60)
            yield Scripted(n, release)
        finally:
            release.set()
            n.stop()


def test_send_wait_timeout_says_still_pending_and_exits_2(scripted: Scripted) -> None:
    """``--timeout 0``: one look, then "still queued/running" and exit 2 (the model holds the turn)."""
    out = crewlet("send", "dev", "HOLD this one", "--wait", "--timeout", "0", url=scripted.node.url)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "is still queued" in out.stderr or "is still running" in out.stderr, out.stderr
    assert "after 0 s" in out.stderr
    scripted.release.set()


def test_send_wait_reports_a_failed_message_and_exits_1(scripted: Scripted) -> None:
    scripted.release.set()
    out = crewlet("send", "dev", "REFUSE this one", "--wait", "--timeout", "60", url=scripted.node.url)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "failed" in out.stderr and "refuses" in out.stderr, out.stderr
    assert "Traceback" not in out.stdout + out.stderr


def test_turns_table_and_json(node: Node, answered: dict[str, Any]) -> None:
    out = crewlet("turns", "--seat", "triage", "--limit", "100", url=node.url)
    assert out.returncode == 0, out.stderr
    assert answered["turn_id"] in out.stdout and "triage" in out.stdout and "delivered" in out.stdout
    assert "lead" not in out.stdout.split("turns (")[1]  # the filter is applied
    out = crewlet("turns", "--limit", "2", "--json", url=node.url)
    view = json.loads(out.stdout)
    assert out.returncode == 0 and 1 <= len(view["turns"]) <= 2 and view["coverage"]["partial"] is False
    out = crewlet("turns", "--limit", "0", url=node.url)
    assert out.returncode == 2 and "--limit" in out.stderr


def test_turn_tree_shows_phases_rounds_and_tool_calls(node: Node, answered: dict[str, Any]) -> None:
    out = crewlet("turn", answered["turn_id"], url=node.url)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert f"turn {answered['turn_id']}" in text and "seat triage" in text
    assert "execute #1" in text and "round 1" in text and "tool " in text and "tokens " in text
    assert "[offline]" in text  # seat text is printed as text, not read as markup
    out = crewlet("turn", answered["turn_id"], "--json", url=node.url)
    turn = json.loads(out.stdout)
    assert turn["turn_id"] == answered["turn_id"] and turn["record"]["rounds"]
    out = crewlet("turn", "no-such-turn", url=node.url)
    assert out.returncode == 2 and "unknown_turn" in out.stderr and "no-such-turn" in out.stderr


def test_work_list_and_show(node: Node, answered: dict[str, Any]) -> None:
    out = crewlet("work", "list", "--json", url=node.url)
    assert out.returncode == 0, out.stderr
    items = json.loads(out.stdout)["items"]
    assert items, "the triage turn files a work item"
    key = items[-1]["key"]
    out = crewlet("work", "list", "--assignee", items[-1]["assignee"] or "lead", url=node.url)
    assert out.returncode == 0 and key in out.stdout and "[offline]" in out.stdout
    out = crewlet("work", "show", key, url=node.url)
    assert out.returncode == 0, out.stderr
    assert key in out.stdout and "status" in out.stdout and "comments (" in out.stdout
    shown = json.loads(crewlet("work", "show", key, "--json", url=node.url).stdout)
    assert shown["key"] == key and isinstance(shown["comments"], list)
    out = crewlet("work", "show", "SUP-999999", url=node.url)
    assert out.returncode == 2 and "404" in out.stderr
    out = crewlet("work", "list", "--status", "bogus-status", url=node.url)
    assert out.returncode == 2 and "status" in out.stderr, out.stderr


# -- crewlet migrate (local: the node's own store, never the broker) --------------------------------


def test_migrate_check_is_1_on_a_fresh_store_and_0_after_migrate(tmp_path: Path) -> None:
    """CO-28 Check: ``--check`` exits 1 on a fresh store and 0 on a migrated one."""
    store = tmp_path / "data" / "node-0"  # where crewlet run --data-dir DATA keeps it
    out = crewlet("migrate", "--check", "--data-dir", str(tmp_path / "data"), process=True)
    assert out.returncode == 1 and "estate.db: create" in out.stdout and "node.db: create" in out.stdout
    assert f"{store}: no store here yet; 2 pending step(s)" in out.stdout, out.stdout
    assert not (store / "estate.db").exists()  # --check changes nothing
    out = crewlet("migrate", "--data-dir", str(tmp_path / "data"))
    assert out.returncode == 0, out.stdout + out.stderr
    assert (store / "estate.db").exists() and (store / "node.db").exists()
    out = crewlet("migrate", "--check", "--data-dir", str(store), "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["pending"] == []


def test_migrate_upgrades_an_older_file(tmp_path: Path) -> None:
    """A file missing an index (as an older build wrote it) lists it pending; migrate adds it back."""
    store = tmp_path / "data" / "node-0"
    assert crewlet("migrate", "--data-dir", str(tmp_path / "data")).returncode == 0
    con = sqlite3.connect(store / "estate.db")
    con.execute("DROP INDEX ix_tasks_assignee")
    con.commit()
    con.close()
    out = crewlet("migrate", "--check", "--data-dir", str(store))
    assert out.returncode == 1 and "estate.db: index ix_tasks_assignee" in out.stdout, out.stdout
    out = crewlet("migrate", "--data-dir", str(store))
    assert out.returncode == 0 and "index ix_tasks_assignee" in out.stdout
    assert crewlet("migrate", "--check", "--data-dir", str(store)).returncode == 0


def test_migrate_refuses_a_scratch_store_naming_store_scratch(tmp_path: Path) -> None:
    """FL-145 accept: ``crewlet migrate`` on a satellite config exits non-zero naming store.scratch."""
    satellite = write_yaml(
        tmp_path / "satellite.yaml",
        {
            "node": {"id": "s", "roles": ["seats"]},
            "store": {"dir": str(tmp_path / "sat"), "scratch": True},
            "stream": {"type": "nats", "url": "nats://127.0.0.1:4222"},
            "api": {"port": 0},
        },
    )
    out = crewlet("migrate", "--node", str(satellite))
    assert out.returncode == 2 and "store.scratch" in out.stderr, out.stderr
    assert not (tmp_path / "sat").exists()
    marked = tmp_path / "marked"
    marked.mkdir()
    (marked / ".scratch").write_text("store.scratch: true\n")
    out = crewlet("migrate", "--check", "--data-dir", str(marked))
    assert out.returncode == 2 and "store.scratch" in out.stderr
    assert sorted(p.name for p in marked.iterdir()) == [".scratch"]


def test_migrate_refuses_a_store_a_running_node_holds(node: Node) -> None:
    out = crewlet("migrate", "--data-dir", str(node.log_path.parent / "data"))
    assert out.returncode == 2 and "in use by" in out.stderr, out.stdout + out.stderr
    out = crewlet("migrate", "--check", "--data-dir", str(node.log_path.parent / "data"))
    assert out.returncode == 0 and "current" in out.stdout, out.stdout + out.stderr


def test_knowledge_import_shows_a_progress_bar_on_a_terminal_only(node: Node, tmp_path: Path) -> None:
    """Issue 15: ``knowledge import`` draws a bar (pages done of found) on a terminal; piped, plain lines."""
    for name in ("alpha", "beta"):
        (tmp_path / f"{name}.md").write_text(f"# Progress {name}\n\nbody of {name}\n")
    env = {"PATH": "/usr/bin:/bin", "CREWLET_URL": node.url, "CREWLET_API_TOKEN": TOKEN}
    command = f"{VENV_BIN / 'crewlet'} knowledge import {tmp_path} --space ENG"
    tty = subprocess.run(  # util-linux `script` gives the command a pseudo-terminal
        ["script", "-qec", command, "/dev/null"], capture_output=True, text=True, timeout=90, env=env
    )
    assert tty.returncode == 0, tty.stdout + tty.stderr
    assert "importing pages" in tty.stdout and "2/2" in tty.stdout, tty.stdout
    piped = crewlet("knowledge", "import", str(tmp_path), "--space", "ENG", url=node.url)
    assert piped.returncode == 0 and "2 page(s)" in piped.stdout
    assert "importing pages" not in piped.stdout + piped.stderr
