"""AG-14 Check: ``crewlet search eval`` with the repo's labelled set, one node, ``type: local``.

One node (all roles, the example company plus ``providers.embeddings: {type: local}``: the
``wordllama`` model inside its wheel) on a real nats-server; the CLI loads
``tests/data/search_eval/basic.yaml`` through the API, waits for the vectors and measures recall@5:
exit 0 (every floor met, hybrid ≥ lexical, + 0.10 on paraphrases). The same set against a node
without ``providers.embeddings`` exits 1 on the hybrid floor (only lexical could run).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.support.procs import REPO, TOKEN, VENV_BIN, NatsServer, Node, free_port, node_file

SET = REPO / "tests" / "data" / "search_eval" / "basic.yaml"


def _node(root: Path, embeddings: dict[str, str] | None) -> tuple[NatsServer, Node]:
    server = NatsServer(root / "nats")
    company = yaml.safe_load((REPO / "examples" / "company.yaml").read_text())
    if embeddings is not None:
        company["providers"]["embeddings"] = embeddings
    (root / "c").mkdir(parents=True)
    (root / "c" / "company.yaml").write_text(yaml.safe_dump(company))
    (root / "c" / "offline-script.yaml").write_text((REPO / "examples" / "offline-script.yaml").read_text())
    port = free_port()
    f = node_file(
        root / "n", node_id="n1", port=port, stream={"type": "nats", "url": server.url, "replicas": 1}
    )
    node = Node(["node", "--node", str(f), "--company", str(root / "c" / "company.yaml")],
                dir=root / "n" / "run", port=port, env={"CREWLET_EMBEDDING_TICK_SECONDS": "1"})  # fmt: skip
    try:
        node.wait_ready(120)
    except BaseException:
        node.stop()
        server.stop()
        raise
    return server, node


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Node]:
    server, node = _node(tmp_path, {"type": "local"})
    try:
        yield node
    finally:
        node.stop()
        server.stop()


def _eval(node: Node, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(VENV_BIN / "crewlet"),
            "search",
            "eval",
            "--set",
            str(SET),
            "--url",
            node.url,
            "--token",
            TOKEN,
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_repo_set_passes_its_floors_with_the_local_model(local: Node) -> None:
    done = _eval(local)
    print(done.stdout)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: every floor met" in done.stdout


def test_without_embeddings_the_hybrid_floor_fails(tmp_path: Path) -> None:
    server, node = _node(tmp_path, None)
    try:
        done = _eval(node, "--wait", "5")
    finally:
        node.stop()
        server.stop()
    assert done.returncode == 1, done.stdout + done.stderr
    assert "only lexical runs" in done.stdout
    assert "FAILED hybrid: could not run" in done.stdout


def test_a_relevant_title_missing_from_the_pages_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"pages": [{"space": "ENG", "title": "A", "body": "b"}],
                                   "queries": [{"q": "x", "relevant": ["B"]}]}))  # fmt: skip
    done = subprocess.run(
        [str(VENV_BIN / "crewlet"), "search", "eval", "--set", str(bad), "--token", TOKEN],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "'B', which no page has" in done.stderr
