"""``crewlet init`` (issue 38): the files it writes validate, a node runs them on the offline
provider, a message gets an answer, and work assigned to a seat ends ``delivered`` (a default-only
script left assigned work ``failed``: stall). It never overwrites a file without ``--force``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from crewlet.cli import app
from tests.node.test_operator_cli import crewlet
from tests.support.procs import TOKEN, Node, free_port

H = {"Authorization": f"Bearer {TOKEN}"}


def test_refuses_to_overwrite(tmp_path: Path) -> None:
    runner = CliRunner()
    assert runner.invoke(app, ["init", str(tmp_path / "c")]).exit_code == 0
    again = runner.invoke(app, ["init", str(tmp_path / "c")])
    assert again.exit_code == 2
    assert f"not overwriting {tmp_path / 'c' / 'company.yaml'}" in again.stderr
    assert runner.invoke(app, ["init", str(tmp_path / "c"), "--force"]).exit_code == 0
    valid = runner.invoke(
        app,
        [
            "validate",
            "--company",
            str(tmp_path / "c" / "company.yaml"),
            "--node",
            str(tmp_path / "c" / "crewlet.yaml"),
        ],
        env={"CREWLET_API_TOKEN": TOKEN},
    )
    assert valid.exit_code == 0, valid.stdout + valid.stderr
    assert "warning" not in valid.stdout + valid.stderr


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    d = tmp_path_factory.mktemp("init") / "mine"
    assert CliRunner().invoke(app, ["init", str(d)]).exit_code == 0
    port = free_port()
    n = Node(
        ["node", "--node", "crewlet.yaml", "--company", "company.yaml", "--api-port", str(port)],
        dir=d,
        port=port,
    )
    try:
        n.wait_ready(60)
        yield n
    finally:
        n.stop()


def test_a_message_gets_an_answer(node: Node) -> None:
    out = crewlet("send", "support", "Hello, I am new here", "--wait", url=node.url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[offline] Hello from support. You asked: Hello, I am new here" in out.stdout


def _items(node: Node) -> list[dict]:
    r = httpx.get(f"{node.url}/work", headers=H, params={"project": "CORE"}, timeout=10)
    assert r.status_code == 200, r.text
    items: list[dict] = r.json()["items"]
    return items


def test_a_question_is_answered_by_reading_and_files_nothing(node: Node) -> None:
    r = httpx.post(
        f"{node.url}/work", headers=H, timeout=10, json={"project": "CORE", "title": "Price list for 2027"}
    )
    assert r.status_code == 201, r.text
    key = r.json()["item"]["key"]
    before = sorted(i["key"] for i in _items(node))
    out = crewlet("send", "support", "What is open on CORE?", "--wait", url=node.url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (
        "[offline] Open on CORE: " in out.stdout
        and f"{key} Price list for 2027 (todo, unassigned)" in out.stdout
    )
    out = crewlet("send", "support", "Where do I start?", "--wait", url=node.url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[offline] From the knowledge base: " in out.stdout
    assert sorted(i["key"] for i in _items(node)) == before


def test_assigned_work_is_delivered(node: Node) -> None:
    r = httpx.post(
        f"{node.url}/work",
        headers=H,
        timeout=10,
        json={"project": "CORE", "title": "Write the onboarding page", "assignee": "builder"},
    )
    assert r.status_code == 201, r.text
    key = r.json()["item"]["key"]
    deadline = time.monotonic() + 60
    turns: list[dict] = []
    while time.monotonic() < deadline:
        turns = [
            t
            for t in httpx.get(f"{node.url}/turns", headers=H, params={"seat": "builder"}, timeout=10).json()[
                "turns"
            ]
            if t.get("outcome") != "running"
        ]
        if turns:
            break
        time.sleep(0.3)
    assert [t["outcome"] for t in turns] == ["delivered"], turns
    comments = httpx.get(f"{node.url}/work/{key}", headers=H, timeout=10).json()["comments"]
    assert [c["body"] for c in comments if c["author"] == "seat:builder"] == [
        f"[offline] On it: {key} is mine now."
    ]


def test_a_bug_report_is_filed_for_the_lead(node: Node) -> None:
    out = crewlet("send", "support", "Found a bug: the export button does nothing", "--wait", url=node.url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "[offline] Filed CORE-" in out.stdout and "for the lead." in out.stdout
    items = httpx.get(f"{node.url}/work", headers=H, params={"assignee": "lead"}, timeout=10).json()["items"]
    assert any(i["title"] == "[offline] Found a bug: the export button does nothing" for i in items), items
