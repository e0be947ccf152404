"""The first-hour CLI verbs (issue 38): ``crewlet work create|comment``, ``crewlet knowledge search``,
``crewlet files list|put|get`` against one running node (``crewlet run``: offline provider, example
company). Each asserts what lands in the tracker, the knowledge base or the file store, and what a
refusal prints (the node's code, the field), never a traceback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.node.test_operator_cli import crewlet
from tests.support.procs import TOKEN, Node, free_port

H = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    d = tmp_path_factory.mktemp("cliw")
    port = free_port()
    n = Node(["run", "--data-dir", str(d / "data"), "--port", str(port)], dir=d, port=port)
    try:
        n.wait_ready(60)
        yield n
    finally:
        n.stop()


def test_work_create_and_comment_land_in_the_tracker(node: Node) -> None:
    out = crewlet(
        "work",
        "create",
        "ENG",
        "Empty config crashes",
        "--body",
        "steps: run with {}",
        "--priority",
        "high",
        "--label",
        "bug",
        "--json",
        url=node.url,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    key = json.loads(out.stdout)["item"]["key"]
    item = httpx.get(f"{node.url}/work/{key}", headers=H, timeout=10).json()
    assert (item["title"], item["priority"], item["labels"], item["project"]) == (
        "Empty config crashes",
        "high",
        ["bug"],
        "ENG",
    )
    assert item["reporter"] == "operator:operator"
    out = crewlet("work", "comment", key, "Seen on 1.4 too", url=node.url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"comment applied on {key} by operator:operator" in out.stdout
    comments = httpx.get(f"{node.url}/work/{key}", headers=H, timeout=10).json()["comments"]
    assert [c["body"] for c in comments if c["author"] == "operator:operator"] == ["Seen on 1.4 too"]


def test_work_create_refusals_name_the_field(node: Node) -> None:
    out = crewlet("work", "create", "NOPE", "x", url=node.url)
    assert out.returncode == 2
    assert "refused (404" in out.stderr and "NOPE" in out.stderr
    out = crewlet("work", "comment", "ENG-999999", "hello", url=node.url)
    assert out.returncode == 2 and "refused (404 not_found)" in out.stderr
    out = crewlet("work", "create", "ENG", "x", url=node.url, token="")
    assert out.returncode == 2


def test_knowledge_search_prints_hits(node: Node) -> None:
    r = httpx.post(
        f"{node.url}/knowledge/pages",
        headers=H,
        timeout=10,
        json={"space": "ENG", "title": "Release sign-off", "body": "The lead approves every release."},
    )
    assert r.status_code in (200, 201), r.text
    out = crewlet("knowledge", "search", "release", url=node.url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1. Release sign-off  [ENG " in out.stdout
    out = crewlet("knowledge", "search", "zyxwvut", url=node.url)
    assert out.returncode == 0 and "no page matched" in out.stdout
    out = crewlet("knowledge", "search", "?!", url=node.url)
    assert out.returncode == 2 and "q" in out.stderr


def test_files_put_list_get_round_trip(node: Node, tmp_path: Path) -> None:
    local = tmp_path / "plan.md"
    local.write_bytes(b"# Plan\nship it\n")
    out = crewlet("files", "put", "ENG", "docs/plan.md", str(local), url=node.url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ENG/docs/plan.md version 1: 15 bytes" in out.stdout
    out = crewlet("files", "list", "ENG", "--json", url=node.url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert [f["path"] for f in json.loads(out.stdout)["files"]] == ["docs/plan.md"]
    dest = tmp_path / "back.md"
    out = crewlet("files", "get", "ENG", "docs/plan.md", "-o", str(dest), url=node.url)
    assert out.returncode == 0, out.stdout + out.stderr
    assert dest.read_bytes() == b"# Plan\nship it\n"
    out = crewlet("files", "get", "ENG", "docs/missing.md", "-o", str(dest), url=node.url)
    assert out.returncode == 2 and "refused (404" in out.stderr
    out = crewlet("files", "put", "ENG", "docs/x.md", str(tmp_path / "absent"), url=node.url)
    assert out.returncode == 2 and "cannot read" in out.stderr
