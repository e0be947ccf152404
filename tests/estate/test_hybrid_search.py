"""Knowledge found by meaning on a real node (AG-11..AG-13, ES-66..ES-68).

One node process (all roles) on a real nats-server, the company of ``examples/company.yaml`` with
``providers.embeddings`` pointing at the scripted server (model ``scripted-hash-256``, AG §0) and
the embedding duty ticking every 2 s. 300 generated pages are published onto the pages log. Then:

- the duty brings them to full coverage with calls of at most 128 inputs (AG-11), and the gauge says 1;
- a hybrid search answers ``mode_used: hybrid, semantic: ok`` with ``lexical_rank`` and
  ``semantic_rank`` on each hit (AG-12, AG-13); ``mode=lexical`` answers by words;
- editing one page republishes only that page's windows (AG-11);
- the embeddings server answering 503: the search answers by words, says ``skipped`` with its
  sentence, and ``crewlet_tracker_search_answers_total{semantic="skipped"}`` rises (AG-13);
- a page at the body limit (1 MiB; a 5 MB page is refused by the page limit before it exists) is
  windowed up to 64 windows, the rest counted, never an error (AG-11).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import nats
import pytest
import yaml
from sqlalchemy import create_engine

from shared.providers import hash_vector
from tests.support.llm_servers import EmbeddingsServer, Reply
from tests.support.pages import publish_pages
from tests.support.procs import REPO, TOKEN, NatsServer, Node, free_port, node_file

H = {"Authorization": f"Bearer {TOKEN}"}
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, every: float = 0.5) -> T:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            value = probe()
        except (httpx.HTTPError, KeyError, TypeError) as e:
            last = e
        else:
            if value:
                return value
            last = value
        time.sleep(every)
    raise AssertionError(f"{what} not seen in {timeout} s (last: {last!r})")


class One:
    def __init__(self, node: Node, emb: EmbeddingsServer, nats_url: str, db: Path) -> None:
        self.node, self.emb, self.nats_url, self.db = node, emb, nats_url, db

    def search(self, q: str, **params: Any) -> dict[str, Any]:
        r = httpx.get(self.node.url + "/knowledge/search", params={"q": q, **params}, headers=H, timeout=30.0)
        assert r.status_code == 200, r.text
        return dict(r.json())

    def metric(self, name: str, **labels: str) -> float:
        text = self.node.get("/metrics").text
        total = 0.0
        for lab, value in re.findall(rf"^{name}(?:\{{([^}}]*)\}})? (\S+)$", text, re.M):
            kv = dict(re.findall(r'(\w+)="([^"]*)"', lab or ""))
            if all(kv.get(k) == v for k, v in labels.items()):
                total += float(value)
        return total

    def write_page(self, space: str, title: str, body: str) -> dict[str, Any]:
        r = httpx.post(
            self.node.url + "/knowledge/pages",
            json={"space": space, "title": title, "body": body},
            headers=H,
            timeout=30.0,
        )
        assert r.status_code in (200, 201), r.text
        return dict(r.json())


@pytest.fixture(scope="module")
def one(tmp_path_factory: pytest.TempPathFactory) -> Iterator[One]:
    root = tmp_path_factory.mktemp("hybrid")
    server = NatsServer(root / "nats")
    emb = EmbeddingsServer()
    node: Node | None = None
    try:
        company = yaml.safe_load((REPO / "examples" / "company.yaml").read_text())
        company["providers"]["embeddings"] = {
            "type": "openai-compatible",
            "model": "scripted-hash-256",
            "base_url": emb.base_url,
            "timeout_seconds": 2,
        }
        cdir = root / "company"
        cdir.mkdir()
        (cdir / "company.yaml").write_text(yaml.safe_dump(company))
        (cdir / "offline-script.yaml").write_text((REPO / "examples" / "offline-script.yaml").read_text())
        port = free_port()
        f = node_file(
            root / "n", node_id="n1", port=port, stream={"type": "nats", "url": server.url, "replicas": 1}
        )
        node = Node(
            ["node", "--node", str(f), "--company", str(cdir / "company.yaml")],
            dir=root / "n" / "run",
            port=port,
            env={"CREWLET_EMBEDDING_TICK_SECONDS": "2"},
        )
        node.wait_ready(120)
        yield One(node, emb, server.url, root / "n" / "store" / "estate.db")
    finally:
        if node is not None:
            node.stop()
        emb.stop()
        server.stop()


def _pages(n: int) -> list[tuple[str, str, str]]:
    topics = ["deploy", "billing", "oncall", "release", "backup", "invoice", "kernel", "garden"]
    return [
        ("ENG", f"Note {i:03d} on {topics[i % 8]}", f"This note {i} talks about {topics[i % 8]} and item{i}.")
        for i in range(n)
    ]


async def _publish(url: str, pages: list[tuple[str, str, str]]) -> None:
    nc = await nats.connect(url)
    try:
        await publish_pages(nc.jetstream(), pages, writer="test")
    finally:
        await nc.close()


def test_300_pages_reach_full_coverage_in_batches_of_at_most_128(one: One) -> None:
    asyncio.run(_publish(one.nats_url, _pages(300)))
    wait_for(
        "coverage 1",
        lambda: one.metric("crewlet_tracker_vector_coverage") == 1.0 and len(one.emb.inputs()) >= 3,
        90,
    )
    sizes = [len(b) for b in one.emb.inputs()]
    assert max(sizes) <= 128 and sum(sizes) >= 300
    assert one.metric("crewlet_embedding_calls_total", provider="openai-compatible") >= 3
    assert one.metric("crewlet_alarm_active", kind="recall_below_floor") == 0


def test_hybrid_answer_says_how_it_searched(one: One) -> None:
    def hybrid() -> dict[str, Any] | None:
        a = one.search("billing item7")
        return a if a.get("semantic") == "ok" else None

    ans = wait_for("a hybrid answer", hybrid, 30)
    assert ans["mode_requested"] == "hybrid" and ans["mode_used"] == "hybrid"
    assert ans["vector_coverage"]["total"] >= 300
    assert len(ans["hits"]) == 8  # REST default limit (ES-66)
    top = ans["hits"][0]
    assert top["kind"] == "page" and top["lexical_rank"] is not None and top["semantic_rank"] is not None
    scores = [h["score"] for h in ans["hits"]]
    assert scores == sorted(scores, reverse=True)
    assert abs(top["score"] - (1 / (60 + top["lexical_rank"]) + 1 / (60 + top["semantic_rank"]))) < 1e-6
    lexical = one.search("billing item7", mode="lexical")
    assert lexical["mode_used"] == "lexical" and lexical["semantic"] == "ok"
    assert "lexical_rank" not in lexical["hits"][0]


def test_editing_a_page_republishes_only_its_windows(one: One) -> None:
    before = len(one.emb.inputs())
    one.write_page("ENG", "Note 005 on oncall", "The pager rotation changed: now weekly." * 3)
    batch = wait_for("the edited page embedded", lambda: one.emb.inputs()[before:] or None, 30)
    assert [len(b) for b in batch] == [1]
    assert batch[0][0].startswith("Note 005 on oncall\n")


def test_a_503_answers_by_words_and_says_skipped(one: One) -> None:
    before = one.metric("crewlet_tracker_search_answers_total", semantic="skipped")
    one.emb.fail_with = Reply({"error": {"message": "down"}}, status=503)
    try:
        ans = one.search("deploy")
    finally:
        one.emb.fail_with = None
    assert ans["searched"] is True and ans["hits"]
    assert (ans["mode_used"], ans["semantic"]) == ("lexical", "skipped")
    assert "the embedding service did not answer" in ans["sentence"]
    assert one.metric("crewlet_tracker_search_answers_total", semantic="skipped") == before + 1


def test_a_page_at_the_body_limit_is_windowed_up_to_the_cap(one: One) -> None:
    before = len(one.emb.inputs())
    one.write_page("ENG", "Huge log", "line of a very long log file\n" * 34_000)
    wait_for("the huge page embedded", lambda: sum(len(b) for b in one.emb.inputs()[before:]) >= 64, 60)
    assert sum(len(b) for b in one.emb.inputs()[before:]) == 64
    wait_for("truncation counted", lambda: one.metric("crewlet_embedding_truncated_total") > 0, 10)


def test_divided_hybrid_equals_the_whole_search(one: One, monkeypatch: pytest.MonkeyPatch) -> None:
    """ES-63 on this node's copy: three slices (64 over 3), each method merged by score, fused once,
    give the whole search's hits, order and scores — also with stage one cut short (KEEP 40 < 300)."""
    from shared.estate import assign
    from shared.estate.domains import vectors
    from shared.estate.domains.pages import fuse_answer, merge_lexical, search
    from shared.estate.domains.vectors import _scan
    from shared.estate.store._fts import lexical_query
    from shared.estate.store._store import FastConn
    from shared.providers import hash_vector

    engine = create_engine(f"sqlite:///file:{one.db}?mode=ro&uri=true")
    try:
        with engine.connect() as conn:
            for keep in (1200, 40):
                monkeypatch.setattr(_scan, "KEEP", keep)
                for q in ("billing item7", "deploy note", "garden kernel release", "pager rotation weekly"):
                    args = {"query": q, "limit": 10, "mode": "hybrid", "vector": hash_vector(q),
                            "model": "scripted-hash-256", "dims": 256}  # fmt: skip
                    whole = search(conn, args)
                    assert isinstance(whole, dict) and whole["hits"], q
                    parts = [
                        search(conn, {**args, "buckets": list(r)}) for r in assign(["a", "b", "c"]).values()
                    ]
                    lex = merge_lexical([p["lexical"] for p in parts])  # type: ignore[call-overload]
                    sem = vectors.merge_semantic([[tuple(c) for c in p["semantic"]] for p in parts])  # type: ignore[call-overload]
                    cur = sum(p["vector_coverage"][0] for p in parts)  # type: ignore[call-overload]
                    tot = sum(p["vector_coverage"][1] for p in parts)  # type: ignore[call-overload]
                    divided = fuse_answer(
                        FastConn(conn),
                        lex,
                        sem,
                        10,
                        cur,
                        tot,
                        "hybrid",
                        match=lexical_query(q, field="q").some,
                    )
                    assert divided == whole, q
    finally:
        engine.dispose()


def test_semantic_mode_without_a_provider_is_refused_naming_mode() -> None:
    from shared.estate import InvalidField
    from shared.router._search import knowledge_search

    async def run(args: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("not asked")

    with pytest.raises(InvalidField) as e:
        asyncio.run(knowledge_search(run, "x", space=None, limit=5, mode="semantic", embedder=None))
    assert e.value.field == "mode" and "semantic_unavailable" in str(e.value)


def test_a_stale_scope_says_how_many_documents_lack_vectors() -> None:
    import numpy as np

    from shared.providers import Embedder
    from shared.router._search import knowledge_search

    class Hash(Embedder):
        provider, model, dims = "test", "scripted-hash-256", 256

        async def embed_batch(self, texts: list[str]) -> np.ndarray:
            return np.asarray([hash_vector(t) for t in texts], dtype=np.float32)

    sent: list[dict[str, Any]] = []

    async def run(args: dict[str, Any]) -> dict[str, Any]:
        sent.append(args)
        cov = {"current": 90, "total": 100, "fraction": 0.9}
        data = {"hits": [], "searched": True, "sentence": "1 page(s) matched.", "mode_used": "hybrid",
                "semantic": "stale", "vector_coverage": cov}  # fmt: skip
        return {"data": data}

    ans = asyncio.run(knowledge_search(run, "pager", space=None, limit=5, mode=None, embedder=Hash()))["data"]
    assert (
        sent[0]["mode"] == "hybrid"
        and sent[0]["model"] == "scripted-hash-256"
        and len(sent[0]["vector"]) == 256
    )
    assert (ans["mode_requested"], ans["semantic"]) == ("hybrid", "stale")
    assert "10 of 100 documents in scope have no current vectors yet" in ans["sentence"]
